"""An ag2 1.x workflow channel with a handoff, written as AG2's documentation writes one, with no
tracing code.

Only the models are stand-ins (AG2's own scripted ``TestConfig``, so it runs with no key): use
yours. Traced and written to a file, with no change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python ag2_workflow.py
    otel-handoff summary spans.jsonl
"""

import asyncio
import json

from ag2 import Agent, tool
from ag2.events import ToolCallEvent
from ag2.knowledge import MemoryKnowledgeStore
from ag2.network import (
    EV_CHANNEL_CLOSED,
    WORKFLOW_TYPE,
    AgentTarget,
    FromSpeaker,
    Handoff,
    Hub,
    TerminateTarget,
    Transition,
    TransitionGraph,
)
from ag2.testing import TestConfig  # stand-in for your model


@tool
def transfer_to_billing(reason: str) -> Handoff:
    """Hand the conversation to billing."""
    return Handoff(target="billing", reason=reason)


async def main() -> None:
    hub = await Hub.open(MemoryKnowledgeStore())
    customer = await hub.register(Agent(name="customer", config=TestConfig()))
    to_billing = ToolCallEvent(name="transfer_to_billing", arguments=json.dumps({"reason": "an invoice"}))
    triage = await hub.register(
        Agent(
            name="triage",
            config=TestConfig(to_billing, "Moving you to billing."),
            tools=[transfer_to_billing],
        )
    )
    billing = await hub.register(
        Agent(name="billing", config=TestConfig("Your last invoice was paid in full."))
    )
    graph = TransitionGraph(
        initial_speaker=customer.agent_id,
        transitions=[Transition(when=FromSpeaker(customer.agent_id), then=AgentTarget(triage.agent_id))],
        default_target=TerminateTarget(reason="answered"),
        max_turns=5,
    )
    channel = await customer.open(
        type=WORKFLOW_TYPE, target=[triage.agent_id, billing.agent_id], knobs={"graph": graph.to_dict()}
    )
    await channel.send("Why was I charged twice?")
    closed = await customer.wait_for_channel_event(
        channel_id=channel.channel_id, predicate=lambda e: e.event_type == EV_CHANNEL_CLOSED, timeout=15
    )
    print("closed:", closed.event_data.get("reason"))


asyncio.run(main())
