"""An unmodified Microsoft Agent Framework app (no tracing code), run offline: a HandoffBuilder
workflow where triage hands off to billing. Used by the auto-instrumentation tests as a user's
`app.py`; the chat client is scripted (no key, no network)."""

import asyncio

from otel_handoff.cli.offline import agent_framework as af


async def main() -> None:
    workflow, _ = af.support(latency=0.0)
    events = [event async for event in workflow.run("I was charged twice", stream=True)]
    print("handoffs:", af.handoffs_sent(events))


if __name__ == "__main__":
    asyncio.run(main())
