"""ag2 1.x workflow channels run offline: a real ``Hub`` and real agents, a scripted model.

Used by ``otel-handoff demo --framework ag2`` and by the tests. Nothing between the agents is
faked: the hub folds, routes and closes channels itself; only the model's replies come from
``ag2.testing.TestConfig`` (strings are text replies, a ``ToolCallEvent`` calls a tool).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ag2 import Agent, tool
from ag2.events import ToolCallEvent
from ag2.knowledge import MemoryKnowledgeStore
from ag2.network import (
    EV_CHANNEL_CLOSED,
    WORKFLOW_TYPE,
    AgentTarget,
    ContextEquals,
    Finish,
    FromSpeaker,
    Handoff,
    Hub,
    TerminateTarget,
    ToolCalled,
    Transition,
    TransitionGraph,
)
from ag2.network.hub.listener import BaseHubListener
from ag2.network.hub.telemetry import HubTelemetryListener
from ag2.testing import TestConfig

# a channel that does not close within this is a broken scenario: fail instead of hanging
CLOSE_TIMEOUT = 15.0

# model-written and user text the scenarios feed AG2: never allowed in a span
PRIVATE_REASON = "caller disputes invoice 4711"
PRIVATE_SUMMARY = "refunded order 4711 to card 4111"
PRIVATE_FINISH_REASON = "customer satisfied with refund"
SEED = "I was charged twice for order 4711"


@tool
def transfer_to_billing(reason: str) -> Handoff:
    """Hand the conversation to billing."""
    return Handoff(target="billing", reason=reason)


@tool
def finish_call(summary: str) -> Finish:
    """End the conversation."""
    return Finish(summary=summary, reason=PRIVATE_FINISH_REASON)


@tool
def escalate(reason: str) -> str:
    """Ask for a supervisor."""
    return "escalating"


TOOLS = {tool_.name: tool_ for tool_ in (transfer_to_billing, finish_call, escalate)}


def call(name: str, **arguments: Any) -> ToolCallEvent:
    """A scripted model reply that calls the tool ``name``."""
    return ToolCallEvent(name=name, arguments=json.dumps(arguments))


@dataclass
class AgentSpec:
    name: str
    replies: Sequence[Any]  # TestConfig's script: texts and ToolCallEvents
    tools: Sequence[str] = ()


@dataclass
class Scenario:
    """Agents, and a graph built from their ids (ids are minted when the hub registers them)."""

    agents: Sequence[AgentSpec]
    graph: Callable[[dict[str, str]], TransitionGraph]
    context_vars: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChannelRun:
    """What AG2 itself did in a channel: every envelope (by agent name) and the close reason."""

    envelopes: list[tuple[str, str, str]] = field(default_factory=list)  # (type, sender, routing)
    close_reason: str | None = None
    channel_id: str = ""


class _Recorder(BaseHubListener):
    """AG2's own view of the channels, to compare runs with and without instrumentation."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.runs: dict[str, ChannelRun] = {}

    async def on_envelope_posted(self, envelope: Any, metadata: Any) -> None:
        if metadata.manifest.type != WORKFLOW_TYPE:
            return
        routing = (envelope.event_data or {}).get("routing")
        if isinstance(routing, dict) and routing.get("target"):
            routing = {**routing, "target": self.hub.name_for(routing["target"])}
        run = self.runs.setdefault(envelope.channel_id, ChannelRun(channel_id=envelope.channel_id))
        run.envelopes.append(
            (envelope.event_type, self.hub.name_for(envelope.sender_id), json.dumps(routing, sort_keys=True))
        )


async def open_hub(tracer_provider: Any = None) -> tuple[Hub, _Recorder]:
    """A hub in memory; with a ``tracer_provider``, AG2's own tracing on (one trace per channel)."""
    store = MemoryKnowledgeStore()
    hub = await Hub.open(
        store, ttl_sweep_interval=0, expectation_sweep_interval=0, tracer_provider=tracer_provider
    )
    if tracer_provider is not None:  # the channel spans that AG2's envelope spans nest under
        hub.register_listener(HubTelemetryListener(store, tracer_provider=tracer_provider))
    recorder = _Recorder(hub)
    hub.register_listener(recorder)
    return hub, recorder


async def run_channel(hub: Hub, recorder: _Recorder, scenario: Scenario, seed: str = SEED) -> ChannelRun:
    """Register the agents, open a workflow channel, send the seed, wait until it closes."""
    clients = [
        await hub.register(
            Agent(
                name=spec.name,
                config=TestConfig(*spec.replies),
                tools=[TOOLS[name] for name in spec.tools],
            )
        )
        for spec in scenario.agents
    ]
    ids = {spec.name: client.agent_id for spec, client in zip(scenario.agents, clients, strict=True)}
    knobs: dict[str, Any] = {"graph": scenario.graph(ids).to_dict()}
    if scenario.context_vars:
        knobs["context_vars"] = scenario.context_vars
    first = clients[0]
    channel = await first.open(type=WORKFLOW_TYPE, target=[c.agent_id for c in clients[1:]], knobs=knobs)
    await channel.send(seed)
    closed = await first.wait_for_channel_event(
        channel_id=channel.channel_id,
        predicate=lambda e: e.event_type == EV_CHANNEL_CLOSED,
        timeout=CLOSE_TIMEOUT,
    )
    run = recorder.runs.setdefault(channel.channel_id, ChannelRun(channel_id=channel.channel_id))
    run.close_reason = closed.event_data.get("reason")
    return run


# --- the scenarios ----------------------------------------------------------------------------
def ping_pong(max_turns: int = 4) -> Scenario:
    """Static ``FromSpeaker`` rules back and forth until the turn limit closes the channel."""
    return Scenario(
        [AgentSpec("triage", ["triage-1", "triage-2"]), AgentSpec("billing", ["billing-1", "billing-2"])],
        lambda ids: TransitionGraph(
            initial_speaker=ids["triage"],
            transitions=[
                Transition(when=FromSpeaker(ids["triage"]), then=AgentTarget(ids["billing"])),
                Transition(when=FromSpeaker(ids["billing"]), then=AgentTarget(ids["triage"])),
            ],
            default_target=TerminateTarget(reason="after_work_terminate"),
            max_turns=max_turns,
        ),
    )


def tool_handoff_then_finish() -> Scenario:
    """A seed routed by rule, a tool returning ``Handoff``, billing's tool returning ``Finish``."""
    return Scenario(
        [
            AgentSpec("reception", ["routing you"]),
            AgentSpec(
                "triage",
                [call("transfer_to_billing", reason=PRIVATE_REASON), "moving you to billing"],
                ["transfer_to_billing"],
            ),
            AgentSpec("billing", [call("finish_call", summary=PRIVATE_SUMMARY), "all done"], ["finish_call"]),
        ],
        lambda ids: TransitionGraph(
            initial_speaker=ids["reception"],
            transitions=[Transition(when=FromSpeaker(ids["reception"]), then=AgentTarget(ids["triage"]))],
            default_target=TerminateTarget(reason="no_rule"),
            max_turns=10,
        ),
    )


def tool_called_and_context() -> Scenario:
    """A ``ToolCalled`` rule to the supervisor, a ``ContextEquals`` rule to the VIP desk, a rule to end."""
    return Scenario(
        [
            AgentSpec("customer", []),
            AgentSpec("triage", [call("escalate", reason=PRIVATE_REASON), "escalated"], ["escalate"]),
            AgentSpec("supervisor", ["supervisor here"]),
            AgentSpec("vip", ["vip desk here"]),
        ],
        lambda ids: TransitionGraph(
            initial_speaker=ids["customer"],
            transitions=[
                Transition(when=FromSpeaker(ids["customer"]), then=AgentTarget(ids["triage"])),
                Transition(when=ToolCalled("escalate"), then=AgentTarget(ids["supervisor"])),
                Transition(when=FromSpeaker(ids["vip"]), then=TerminateTarget(reason="handled")),
                Transition(
                    when=ContextEquals(key="tier", value="gold"),
                    then=AgentTarget(ids["vip"]),
                    priority=1,
                ),
            ],
            max_turns=10,
        ),
        context_vars={"tier": "gold"},
    )


def default_terminate() -> Scenario:
    """No rule for billing's turn: the graph's default (a ``TerminateTarget``) ends the channel."""
    return Scenario(
        [AgentSpec("customer", []), AgentSpec("billing", ["billing here"])],
        lambda ids: TransitionGraph(
            initial_speaker=ids["customer"],
            transitions=[Transition(when=FromSpeaker(ids["customer"]), then=AgentTarget(ids["billing"]))],
            default_target=TerminateTarget(reason="no_rule"),
        ),
    )


def round_robin(max_turns: int = 5) -> Scenario:
    names = ("alpha", "beta", "gamma")
    return Scenario(
        [AgentSpec(name, [f"{name}-{i}" for i in range(3)]) for name in names],
        lambda ids: TransitionGraph.round_robin([ids[name] for name in names], max_turns=max_turns),
    )


# the demo's channels: what each shows, and the scenario
DEMO_CHANNELS: tuple[tuple[str, Callable[[], Scenario]], ...] = (
    ("a tool hands off (Handoff), another ends the channel (Finish)", lambda: tool_handoff_then_finish()),
    ("a ToolCalled rule, then ContextEquals rules", lambda: tool_called_and_context()),
    ("FromSpeaker ping-pong until max_turns", lambda: ping_pong()),
)


async def demo_workflow(tracer_provider: Any = None) -> dict[str, str]:
    """Run the demo's AG2 1.x channels, each on a hub of its own (agent names are unique per hub).

    Returns what each channel shows, by channel id (the handoffs' ``gen_ai.conversation.id``).
    """
    labels = {}
    for label, scenario in DEMO_CHANNELS:
        hub, recorder = await open_hub(tracer_provider)
        try:
            labels[(await run_channel(hub, recorder, scenario())).channel_id] = label
        finally:
            await hub.close()
    return labels


__all__ = [
    "CLOSE_TIMEOUT",
    "PRIVATE_FINISH_REASON",
    "PRIVATE_REASON",
    "PRIVATE_SUMMARY",
    "SEED",
    "AgentSpec",
    "ChannelRun",
    "Scenario",
    "default_terminate",
    "demo_workflow",
    "open_hub",
    "ping_pong",
    "round_robin",
    "run_channel",
    "tool_called_and_context",
    "tool_handoff_then_finish",
]
