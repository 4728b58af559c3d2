"""An unmodified ag2 1.x app (no tracing code), run offline: a workflow channel with handoffs.

Used by the auto-instrumentation tests as a user's `app.py`: a rule hands the seed to billing,
billing hands back by rule, triage's tool returns `Handoff`, and the turn limit closes it.
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
from ag2.testing import TestConfig


@tool
def transfer_to_billing(reason: str) -> Handoff:
    """Hand the conversation to billing."""
    return Handoff(target="billing", reason=reason)


async def main() -> None:
    hub = await Hub.open(MemoryKnowledgeStore(), ttl_sweep_interval=0, expectation_sweep_interval=0)
    transfer = ToolCallEvent(name="transfer_to_billing", arguments=json.dumps({"reason": "invoice"}))
    triage = await hub.register(
        Agent(name="triage", config=TestConfig(transfer, "triage: done"), tools=[transfer_to_billing])
    )
    billing = await hub.register(Agent(name="billing", config=TestConfig("billing-1", "billing-2")))
    graph = TransitionGraph(
        initial_speaker=triage.agent_id,
        transitions=[
            Transition(when=FromSpeaker(triage.agent_id), then=AgentTarget(billing.agent_id)),
            Transition(when=FromSpeaker(billing.agent_id), then=AgentTarget(triage.agent_id)),
        ],
        default_target=TerminateTarget(reason="after_work_terminate"),
        max_turns=4,
    )
    channel = await triage.open(
        type=WORKFLOW_TYPE, target=[billing.agent_id], knobs={"graph": graph.to_dict()}
    )
    await channel.send("hello")
    closed = await triage.wait_for_channel_event(
        channel_id=channel.channel_id, predicate=lambda e: e.event_type == EV_CHANNEL_CLOSED, timeout=15
    )
    print("closed:", closed.event_data.get("reason"))
    await hub.close()


if __name__ == "__main__":
    asyncio.run(main())
