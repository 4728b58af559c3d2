"""An unmodified OpenAI Agents SDK app (no tracing code), run offline: triage hands off to billing.

Used by the auto-instrumentation tests as a user's `app.py`. The model is the SDK's own scripted
model; the app turns the SDK's trace export to OpenAI off (it has no key and no network here).
"""

import asyncio

from agents import Agent, Runner, set_trace_processors
from agents.testing import ScriptedModel, assistant_message, function_call


async def main() -> None:
    set_trace_processors([])
    billing = Agent(name="billing", model=ScriptedModel([[assistant_message("Billing here.")]]))
    triage = Agent(
        name="triage",
        handoffs=[billing],
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="call_1")]]),
    )
    result = Runner.run_streamed(triage, "I was charged twice")
    async for _event in result.stream_events():
        pass
    print("answered by:", result.last_agent.name)


if __name__ == "__main__":
    asyncio.run(main())
