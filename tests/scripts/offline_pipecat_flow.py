"""An unmodified Pipecat Flows app (no tracing code), run offline: one tool transition.

Used by the auto-instrumentation tests as a user's `app.py`. The pipeline is Pipecat's own; the
model, TTS and output edges are the project's scripted ones.
"""

import asyncio

from loguru import logger
from pipecat.flows import FlowsFunctionSchema

from otel_handoff.cli.offline import pipecat_flows as pf


async def go_to_booking(args, flow_manager):
    return {"status": "ok"}, {"name": "booking", "task_messages": [{"role": "developer", "content": "Book."}]}


GREETING = {
    "name": "greeting",
    "task_messages": [{"role": "developer", "content": "Greet the caller."}],
    "functions": [
        FlowsFunctionSchema(
            name="go_to_booking", description="Book", properties={}, required=[], handler=go_to_booking
        )
    ],
}


async def main() -> None:
    logger.remove()  # Pipecat logs every frame at DEBUG
    run = await pf.run_flow(
        GREETING,
        ["Hello, how can I help?", [("go_to_booking", {})], "Booked."],
        [pf.user_says("I'd like to book")],
        until=lambda flow_manager: flow_manager.current_node == "booking",
    )
    print(f"final node: {run.final_node}")


if __name__ == "__main__":
    asyncio.run(main())
