"""An unmodified LlamaIndex app (no tracing code), run offline: an AgentWorkflow where triage hands
off to billing. Used by the auto-instrumentation tests as a user's `app.py`; the LLM is scripted
(no key, no network)."""

import asyncio

from otel_handoff.cli.offline import llama_index as li


async def main() -> None:
    workflow = li.make_workflow([li.handoff_call("billing", "call-1")], [{"text": "Paid."}], latency=0.0)
    handler = workflow.run(user_msg="I was charged twice")
    async for _ in handler.stream_events():
        pass
    result = await handler
    print("active agent:", result.current_agent_name)


if __name__ == "__main__":
    asyncio.run(main())
