"""ag2 1.x workflow-channel handoffs, traced from real offline hubs (``ag2.network``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import pytest

pytest.importorskip("ag2.network", reason="needs ag2 >= 1 (ag2.network)")

from ag2.agent import Agent
from ag2.network.adapters.workflow import WorkflowAdapter
from ag2.network.hub.core import Hub
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans, recorded_warnings
from wrapt import FunctionWrapper

from otel_handoff.ag2 import AG2HandoffInstrumentor, _network
from otel_handoff.cli.offline import ag2_network as offline
from otel_handoff.core import schema as sc

PATCHED = [
    (WorkflowAdapter, "fold"),
    (Agent, "ask"),
    (Hub, "__init__"),
    (Hub, "close"),
    *((Hub, hook) for hook in _network.HUB_HOOKS),
]

ALLOWED_ATTRIBUTES = {
    sc.GEN_AI_OPERATION_NAME,
    sc.FROM_AGENT_NAME,
    sc.TO_AGENT_NAME,
    sc.FROM_AGENT_ID,
    sc.TO_AGENT_ID,
    sc.GEN_AI_TOOL_NAME,
    sc.GEN_AI_CONVERSATION_ID,
    sc.FRAMEWORK,
    sc.FRAMEWORK_VERSION,
    sc.KIND,
    sc.CONDITION_TYPE,
    sc.TARGET_TYPE,
    sc.OUTCOME,
    sc.SEQUENCE,
    sc.DURATION,
}


@pytest.fixture
def ag2(instrument: Any, spans: Spans) -> Spans:
    instrument(AG2HandoffInstrumentor)
    return spans


async def _run(scenario: offline.Scenario, tracer_provider: Any = None) -> offline.ChannelRun:
    hub, recorder = await offline.open_hub(tracer_provider)
    try:
        return await offline.run_channel(hub, recorder, scenario)
    finally:
        await hub.close()


def _handoffs(spans: Spans) -> list[ReadableSpan]:
    return [s for s in spans.handoffs() if s.attributes[sc.FRAMEWORK] == sc.FRAMEWORK_AG2]


def _summary(span: ReadableSpan) -> tuple[Any, ...]:
    a = span.attributes
    return (
        a[sc.KIND],
        a[sc.FROM_AGENT_NAME],
        a.get(sc.TO_AGENT_NAME),
        a.get(sc.CONDITION_TYPE),
        a.get(sc.TARGET_TYPE),
        a.get(sc.GEN_AI_TOOL_NAME),
        a[sc.OUTCOME],
    )


def _check_common(handoffs: list[ReadableSpan]) -> None:
    import ag2

    for sequence, span in enumerate(handoffs, start=1):
        a = span.attributes
        assert set(a) <= ALLOWED_ATTRIBUTES, set(a) - ALLOWED_ATTRIBUTES
        assert a[sc.GEN_AI_OPERATION_NAME] == sc.OPERATION_HANDOFF
        assert a[sc.FRAMEWORK] == "ag2" and a[sc.FRAMEWORK_VERSION] == ag2.__version__
        assert a[sc.SEQUENCE] == sequence
        assert (sc.TO_AGENT_NAME in a) == (sc.TO_AGENT_ID in a)
        assert a[sc.FROM_AGENT_ID] != a.get(sc.TO_AGENT_ID)  # the same speaker again is no handoff
        assert a[sc.DURATION] == pytest.approx((span.end_time - span.start_time) / 1e9, abs=1e-6)


async def test_from_speaker_ping_pong_until_max_turns(ag2: Spans, open_spans: OpenSpans) -> None:
    run = await _run(offline.ping_pong(max_turns=4))
    assert run.close_reason == "max_turns"
    handoffs = _handoffs(ag2)
    _check_common(handoffs)
    # the channel id is AG2's name for the conversation
    assert {s.attributes[sc.GEN_AI_CONVERSATION_ID] for s in handoffs} == {run.channel_id}
    rule = ("FromSpeaker", "AgentTarget", None, "completed")
    assert [_summary(s) for s in handoffs] == [
        ("transition", "triage", "billing", *rule),
        ("transition", "billing", "triage", *rule),
        ("transition", "triage", "billing", *rule),
        ("max_turns", "billing", None, None, None, None, "completed"),
    ]
    # one root per channel (AG2's own tracing is off), ended, holding every handoff
    (root,) = ag2.named(sc.SPAN_CHAT)
    assert root.parent is None and root.attributes[sc.CHAT_HANDOFFS] == 4
    assert all(s.parent.span_id == root.context.span_id for s in handoffs)
    assert open_spans.ours() == []


async def test_tool_handoff_and_finish(ag2: Spans) -> None:
    run = await _run(offline.tool_handoff_then_finish())
    assert run.close_reason == offline.PRIVATE_FINISH_REASON  # AG2's close reason: not in our spans
    handoffs = _handoffs(ag2)
    _check_common(handoffs)
    assert [_summary(s) for s in handoffs] == [
        ("transition", "reception", "triage", "FromSpeaker", "AgentTarget", None, "completed"),
        ("handoff", "triage", "billing", None, None, "transfer_to_billing", "completed"),
        ("finish", "billing", None, None, None, "finish_call", "completed"),
    ]


async def test_tool_called_context_equals_and_terminating_rule(ag2: Spans) -> None:
    run = await _run(offline.tool_called_and_context())
    assert run.close_reason == "handled"
    handoffs = _handoffs(ag2)
    _check_common(handoffs)
    assert [_summary(s) for s in handoffs] == [
        ("transition", "customer", "triage", "FromSpeaker", "AgentTarget", None, "completed"),
        ("tool_called", "triage", "supervisor", "ToolCalled", "AgentTarget", "escalate", "completed"),
        ("transition", "supervisor", "vip", "ContextEquals", "AgentTarget", None, "completed"),
        ("transition", "vip", None, "FromSpeaker", "TerminateTarget", None, "completed"),
    ]


async def test_default_target_ends_the_channel(ag2: Spans) -> None:
    run = await _run(offline.default_terminate())
    assert run.close_reason == "no_rule"
    handoffs = _handoffs(ag2)
    _check_common(handoffs)
    assert [_summary(s) for s in handoffs] == [
        ("transition", "customer", "billing", "FromSpeaker", "AgentTarget", None, "completed"),
        ("default", "billing", None, None, "TerminateTarget", None, "completed"),
    ]


async def test_round_robin(ag2: Spans) -> None:
    run = await _run(offline.round_robin(max_turns=5))
    assert run.close_reason == "max_turns"
    handoffs = _handoffs(ag2)
    _check_common(handoffs)
    rule = ("Always", "RoundRobinTarget", None, "completed")
    assert [_summary(s) for s in handoffs] == [
        ("transition", "alpha", "beta", *rule),
        ("transition", "beta", "gamma", *rule),
        ("transition", "gamma", "alpha", *rule),
        ("transition", "alpha", "beta", *rule),
        ("max_turns", "beta", None, None, None, None, "completed"),
    ]


async def test_handoff_lasts_until_the_next_agent_turn_begins(
    ag2: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The span ends when the next agent's turn begins, not when AG2 posted the decision."""
    begun: list[int] = []
    original = _network.ChannelTrack.turn_begins

    def spy(self: Any, envelope_id: str, agent_id: str | None, now_ns: int) -> None:
        begun.append(now_ns)
        original(self, envelope_id, agent_id, now_ns)

    monkeypatch.setattr(_network.ChannelTrack, "turn_begins", spy)
    await _run(offline.ping_pong(max_turns=4))
    handoffs = _handoffs(ag2)
    # the three handoffs that gave the turn to an agent end exactly when that turn began
    for span in handoffs[:3]:
        assert span.end_time in begun
        assert span.start_time < span.end_time


async def test_ag2_own_tracing_puts_handoffs_under_the_envelope(provider: TracerProvider, ag2: Spans) -> None:
    await _run(offline.tool_handoff_then_finish(), tracer_provider=provider)
    handoffs = _handoffs(ag2)
    assert len(handoffs) == 3
    assert ag2.named(sc.SPAN_CHAT) == []  # AG2's trace is the parent: no root of ours
    for span in handoffs:
        parent = ag2.by_id(span.parent.span_id)
        assert parent is not None and parent.name.startswith("network.envelope")
        assert parent.context.trace_id == span.context.trace_id
        assert span.start_time >= parent.start_time


async def test_two_channels_at_once(ag2: Spans) -> None:
    hub, recorder = await offline.open_hub()
    try:
        runs = await asyncio.gather(
            offline.run_channel(hub, recorder, offline.ping_pong(max_turns=4)),
            offline.run_channel(hub, recorder, offline.round_robin(max_turns=5)),
        )
    finally:
        await hub.close()
    assert [r.close_reason for r in runs] == ["max_turns", "max_turns"]
    roots = ag2.named(sc.SPAN_CHAT)
    assert len(roots) == 2
    by_root = {
        root.context.span_id: [s for s in _handoffs(ag2) if s.parent.span_id == root.context.span_id]
        for root in roots
    }
    kinds = sorted(tuple(s.attributes[sc.KIND] for s in spans) for spans in by_root.values())
    assert kinds == [
        ("transition", "transition", "transition", "max_turns"),
        ("transition", "transition", "transition", "transition", "max_turns"),
    ]
    for spans_of_channel in by_root.values():
        assert [s.attributes[sc.SEQUENCE] for s in spans_of_channel] == list(
            range(1, len(spans_of_channel) + 1)
        )
        assert len({s.context.trace_id for s in spans_of_channel}) == 1
    conversations = {
        root: {s.attributes[sc.GEN_AI_CONVERSATION_ID] for s in spans} for root, spans in by_root.items()
    }
    assert sorted(c for ids in conversations.values() for c in ids) == sorted(r.channel_id for r in runs)


async def test_hub_replay_adds_no_handoff(ag2: Spans, open_spans: OpenSpans) -> None:
    """``Hub.hydrate()`` re-runs ``fold`` over an open channel's log: no phantom handoffs."""
    scenario = offline.Scenario(
        [offline.AgentSpec("customer", []), offline.AgentSpec("billing", [""])],  # billing stays silent
        offline.default_terminate().graph,
    )
    hub, _ = await offline.open_hub()
    try:
        clients = [
            await hub.register(Agent(name=s.name, config=offline.TestConfig(*s.replies)))
            for s in scenario.agents
        ]
        ids = {s.name: c.agent_id for s, c in zip(scenario.agents, clients, strict=True)}
        channel = await clients[0].open(
            type="workflow", target=[clients[1].agent_id], knobs={"graph": scenario.graph(ids).to_dict()}
        )
        await channel.send(offline.SEED)
        await _until(lambda: len(_handoffs(ag2)) == 1)  # billing's (silent) turn began
        state_before = hub.adapter_state(channel.channel_id)
        for _ in range(3):
            await hub.hydrate()
        assert hub.adapter_state(channel.channel_id).turn_count == state_before.turn_count == 1
        assert len(_handoffs(ag2)) == 1
    finally:
        await hub.close()
    # the channel was left open: its root ends with the hub, nothing stays open
    assert len(_handoffs(ag2)) == 1 and open_spans.ours() == []
    assert len(ag2.named(sc.SPAN_CHAT)) == 1


async def _until(predicate: Any, timeout: float = offline.CLOSE_TIMEOUT) -> None:
    """Wait for the event loop to reach a state: yields, never sleeps a guessed time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0)


async def test_channel_behaviour_unchanged(provider: TracerProvider, spans: Spans) -> None:
    """Envelopes, close reasons and the warnings the app sees: the same with and without us."""
    scenarios = (offline.ping_pong, offline.tool_handoff_then_finish, offline.tool_called_and_context)
    with recorded_warnings() as plain_warnings:
        plain = [await _run(make()) for make in scenarios]
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with recorded_warnings() as traced_warnings:
            traced = [await _run(make()) for make in scenarios]
    finally:
        instrumentor.uninstrument()
    assert traced_warnings == plain_warnings
    for a, b in zip(plain, traced, strict=True):
        assert (a.envelopes, a.close_reason) == (b.envelopes, b.close_reason)
        assert a.envelopes  # the comparison compared something
    assert len(_handoffs(spans)) == 4 + 3 + 4


async def test_uninstrument_restores_everything(provider: TracerProvider, spans: Spans) -> None:
    originals = {(owner, name): vars(owner)[name] for owner, name in PATCHED}
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    assert all(isinstance(vars(owner)[name], FunctionWrapper) for owner, name in PATCHED)
    hub, recorder = await offline.open_hub()
    instrumentor.uninstrument()
    try:
        assert {(o, n): vars(o)[n] for o, n in PATCHED} == originals
        await offline.run_channel(hub, recorder, offline.ping_pong())
    finally:
        await hub.close()
    assert _handoffs(spans) == []
    # and instrumenting again works
    instrumentor.instrument(tracer_provider=provider)
    try:
        await _run(offline.ping_pong())
    finally:
        instrumentor.uninstrument()
    assert len(_handoffs(spans)) == 4


async def test_turn_that_fails_before_it_begins_is_an_error(
    ag2: Spans, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AG2 reports a turn that failed before the agent ran: the pending handoff ends as an error."""
    from ag2.network.client import handlers

    async def broken_view(client: Any, envelope: Any) -> list[Any]:
        raise RuntimeError("store unavailable")

    hub, _ = await offline.open_hub()
    try:
        scenario = offline.default_terminate()
        clients = [
            await hub.register(Agent(name=s.name, config=offline.TestConfig(*s.replies)))
            for s in scenario.agents
        ]
        ids = {s.name: c.agent_id for s, c in zip(scenario.agents, clients, strict=True)}
        channel = await clients[0].open(
            type="workflow", target=[clients[1].agent_id], knobs={"graph": scenario.graph(ids).to_dict()}
        )
        monkeypatch.setattr(handlers, "read_wal_until", broken_view)
        await channel.send(offline.SEED)
        await _until(lambda: len(_handoffs(ag2)) == 1)
    finally:
        await hub.close()
    (span,) = _handoffs(ag2)
    assert span.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[sc.ERROR_TYPE] == "RuntimeError"


async def test_handoffs_are_counted_in_metrics_by_kind(ag2: Spans, metric_reader: Any) -> None:
    await _run(offline.tool_handoff_then_finish())
    counted: dict[str, int] = {}
    for resource_metrics in metric_reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == sc.METRIC_DURATION:
                    for point in metric.data.data_points:
                        if point.attributes.get(sc.FRAMEWORK) == "ag2":
                            kind = point.attributes[sc.KIND]
                            counted[kind] = counted.get(kind, 0) + point.count
    assert counted == {"transition": 1, "handoff": 1, "finish": 1}


async def test_faults_in_our_code_never_reach_the_channel(
    ag2: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("renamed in a future AG2")

    monkeypatch.setattr(_network, "classify", broken)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        run = await _run(offline.ping_pong())
    assert run.close_reason == "max_turns" and len(run.envelopes) >= 4
    assert _handoffs(ag2) == []
    assert sum("internal error" in r.getMessage() for r in caplog.records) == 1  # logged once


# --- invisible to the app's hub ---------------------------------------------------------------------
async def _hub_as_the_app_sees_it(scenario: offline.Scenario) -> tuple[dict[str, Any], list[type], Any]:
    hub, recorder = await offline.open_hub()
    try:
        run = await offline.run_channel(hub, recorder, scenario)
        return hub.health(), [type(listener) for listener in hub._listeners], run.envelopes
    finally:
        await hub.close()


async def test_hub_health_and_listeners_are_the_apps_own(provider: TracerProvider, spans: Spans) -> None:
    """We register no listener: ``Hub.health()`` and the listener list are identical with and without us."""
    plain = await _hub_as_the_app_sees_it(offline.ping_pong())
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await _hub_as_the_app_sees_it(offline.ping_pong())
    finally:
        instrumentor.uninstrument()
    assert traced == plain
    assert plain[0]["registered_listeners"] == len(plain[1]) >= 1  # compared something real
    assert len(_handoffs(spans)) == 4  # and the handoffs were traced all the same


class _AuditingHub(Hub):
    """An app's hub subclass overriding a hook, as AG2 invites ("override hooks directly")."""

    posted: ClassVar[list[str]] = []

    async def on_envelope_posted(self, envelope: Any, metadata: Any) -> None:
        type(self).posted.append(envelope.event_type)
        await super().on_envelope_posted(envelope, metadata)


async def test_a_hub_subclass_overriding_a_hook_is_observed_once(ag2: Spans, monkeypatch: Any) -> None:
    monkeypatch.setattr(offline, "Hub", _AuditingHub)  # what the app's own hub class would be
    _AuditingHub.posted = []
    run = await _run(offline.ping_pong(max_turns=4))
    assert run.close_reason == "max_turns" and _AuditingHub.posted  # the app's override still runs
    kinds = [s.attributes[sc.KIND] for s in _handoffs(ag2)]
    assert kinds == ["transition", "transition", "transition", "max_turns"]  # each seen once
