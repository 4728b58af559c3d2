"""A LiveKit Agents session with a tool transfer, written as LiveKit's documentation writes one (its
testing guide runs a session on text, no room), with no tracing code.

Only the LLM is a stand-in (a scripted one, so it runs with no key): use yours. Traced and written
to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python livekit_session.py
    otel-handoff summary spans.jsonl
"""

import asyncio

from livekit.agents import Agent, AgentSession, function_tool

from otel_handoff.cli.offline.livekit import ScriptedLLM  # stand-in for your LLM


class Billing(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="Answer billing questions.")


class Triage(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="Route the customer to the right specialist.")

    @function_tool
    async def transfer_to_billing(self) -> Agent:
        """Transfer the customer to billing."""
        return Billing()


async def main() -> None:
    model = ScriptedLLM(tool_calls=["transfer_to_billing"], reply="Your last invoice was paid in full.")
    async with AgentSession(llm=model) as session:
        await session.start(agent=Triage())
        result = await session.run(user_input="Why was I charged twice?")
        print([event.type for event in result.events])


asyncio.run(main())
