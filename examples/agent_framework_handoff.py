"""A Microsoft Agent Framework ``HandoffBuilder`` workflow, written as its documentation writes one,
with no tracing code.

Only the chat client is a stand-in (a scripted one, so it runs with no key): use your own. Traced
and written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python agent_framework_handoff.py
    otel-handoff summary spans.jsonl
"""

import asyncio

from agent_framework import Agent
from agent_framework_orchestrations import HandoffBuilder

from otel_handoff.cli.offline.agent_framework import ScriptedClient  # stand-in for your client

triage = Agent(
    client=ScriptedClient("triage", [{"tool": "handoff_to_billing", "id": "call-1"}]),
    name="triage",
    instructions="Route the customer to the right specialist.",
    description="Routes the customer.",
    require_per_service_call_history_persistence=True,
)
billing = Agent(
    client=ScriptedClient("billing", [{"text": "Your last invoice was paid in full."}], latency=0.12),
    name="billing",
    instructions="Answer billing questions.",
    description="Answers billing questions.",
    require_per_service_call_history_persistence=True,
)
workflow = HandoffBuilder(name="support", participants=[triage, billing]).with_start_agent(triage).build()


async def main() -> None:
    async for event in workflow.run("Why was I charged twice?", stream=True):
        if event.type == "handoff_sent":
            print(f"handed off: {event.data.source} -> {event.data.target}")


asyncio.run(main())
