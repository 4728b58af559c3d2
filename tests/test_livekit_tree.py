"""One tree per handoff beside LiveKit's own spans (its `update_agent`, 1.8.2+), and ours whole
where LiveKit's telemetry is off or goes to another provider."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from livekit.agents import AgentSession
from livekit.agents.telemetry import set_tracer_provider
from lk_agents import Triage
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider
from support import Spans
from test_livekit_handoffs import child_names

from otel_handoff.cli.offline.livekit import ScriptedLLM, settle
from otel_handoff.cli.waterfall import render_handoffs
from otel_handoff.core import schema as sc
from otel_handoff.livekit import LiveKitHandoffInstrumentor
from otel_handoff.livekit._features import UPDATE_AGENT_SPAN, detect, session_tracer

FEATURES = detect()
# our phases that LiveKit's own spans stand for, and what we alone see
STOOD_FOR = {spec.span for spec in sc.PHASE_REGISTRY if spec.framework_span}
OURS_ALONE = {
    sc.SPAN_QUEUE_WAIT,
    sc.SPAN_LOOP_WAIT,
    sc.SPAN_LOCK_WAIT,
    sc.SPAN_PREPARE,
    sc.SPAN_CLOSE,
    sc.SPAN_SWITCH,
    sc.SPAN_REALTIME_UPDATE,
}
WHOLE = (
    [sc.SPAN_PREPARE, sc.SPAN_PAUSE, sc.SPAN_SWITCH, sc.SPAN_START, sc.SPAN_LOOP_WAIT, sc.SPAN_ON_ENTER],
    [sc.SPAN_PREPARE, sc.SPAN_DRAIN, sc.SPAN_CLOSE, sc.SPAN_SWITCH, sc.SPAN_RESUME],
)


async def enter_and_return() -> None:
    """An AgentTask entering (pause, start, on_enter) and handing back (drain, close, resume)."""
    session = AgentSession(llm=ScriptedLLM(tool_calls=["ask_email"]))
    await session.start(agent=Triage())
    try:
        await session.run(user_input="take my email")
        await settle(session)
    finally:
        await session.aclose()


def below(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id),
        key=lambda s: s.start_time,
    )


async def test_one_tree_per_handoff(instrumented: Spans) -> None:
    await enter_and_return()
    enter, back = instrumented.handoffs()
    everything = instrumented.all()
    # the same phases, with the same seconds, whoever's span shows them
    assert [child_names(instrumented, h) for h in (enter, back)] == list(WHOLE)
    waterfall = render_handoffs(everything)
    for handoff in (enter, back):
        for phase in instrumented.phases(handoff):
            spec = sc.PHASES_BY_SPAN[phase.name]
            seconds = (phase.attributes or {}).get(spec.duration_attribute)
            if spec.on_handoff_span:
                seconds = handoff.attributes[spec.duration_attribute]
            if spec.on_handoff_span and phase.name != sc.SPAN_LOCK_WAIT:  # lock waits: a sum of spans
                assert phase.end_time - phase.start_time == pytest.approx(seconds * 1e9, abs=1)
            row = rf"^\s*{phase.name.removeprefix('agent_handoff.')}( \(\w+\))?\s+│"  # lock_wait (activity)
            assert seconds is not None and re.search(row, waterfall, re.MULTILINE)
    if not FEATURES.update_agent_span:  # 1.2.18 - 1.8.1: nothing changes, LiveKit's spans beside ours
        assert not instrumented.named(UPDATE_AGENT_SPAN)
        assert [n for n in (c.name for c in instrumented.children(enter)) if n != sc.SPAN_LOCK_WAIT] == WHOLE[
            0
        ]
        return
    # LiveKit's update_agent is the child of ours, its drain/pause and start/resume under it
    for handoff, theirs in (
        (enter, ["pause_agent_activity", "start_agent_activity"]),
        (back, ["drain_agent_activity", "resume_agent_activity"]),
    ):
        [update] = [s for s in below(everything, handoff) if s.name == UPDATE_AGENT_SPAN]
        assert update.context.trace_id == handoff.context.trace_id
        assert update.end_time <= handoff.end_time  # no child of ours outlives it
        assert [s.name for s in below(everything, update)] == theirs
        ours = {s.name for s in below(everything, handoff) if s.name.startswith(sc.SPAN_HANDOFF)}
        assert ours <= OURS_ALONE
    [update] = [s for s in below(everything, enter) if s.name == UPDATE_AGENT_SPAN]
    [start] = [s for s in below(everything, update) if s.name == "start_agent_activity"]
    assert [s.name for s in below(everything, start)] == ["setup_toolsets", "on_enter"]
    # nothing sent twice: no phase span of ours that LiveKit's stand for, anywhere
    assert not [s for s in everything if s.name in STOOD_FOR]
    assert enter.attributes[sc.ON_ENTER_DURATION] >= 0  # on the handoff, as no span of ours holds it
    assert all(
        s.parent is not None and instrumented.by_id(s.parent.span_id).name == sc.SPAN_HANDOFF
        for s in instrumented.named(UPDATE_AGENT_SPAN)
    )


@pytest.fixture
def livekit_provider(provider: TracerProvider) -> Callable[[Any], None]:
    """Give LiveKit's telemetry a provider of the test's; the suite's is restored after it."""
    yield set_tracer_provider
    set_tracer_provider(provider)


async def test_livekit_telemetry_off_keeps_our_tree(
    instrument: Callable[..., Any], spans: Spans, livekit_provider: Callable[[Any], None]
) -> None:
    livekit_provider(NoOpTracerProvider())  # the app turned LiveKit's own telemetry off
    instrument(LiveKitHandoffInstrumentor)
    await enter_and_return()
    enter, back = spans.handoffs()
    assert [
        [c.name for c in spans.children(h) if c.name != sc.SPAN_LOCK_WAIT] for h in (enter, back)
    ] == list(WHOLE)
    assert not [s for s in spans.all() if s.instrumentation_scope.name == "livekit-agents"]
    assert sc.ON_ENTER_DURATION not in enter.attributes  # on its span, as before


async def test_livekit_spans_elsewhere_keep_both_trees(
    instrument: Callable[..., Any], spans: Spans, livekit_provider: Callable[[Any], None]
) -> None:
    """LiveKit's spans on a provider of their own (LiveKit Cloud's, say): neither tree loses a
    span, and LiveKit's keeps its parents."""
    theirs = InMemorySpanExporter()
    own = TracerProvider()
    own.add_span_processor(SimpleSpanProcessor(theirs))
    livekit_provider(own)
    instrument(LiveKitHandoffInstrumentor)
    await enter_and_return()
    enter, back = spans.handoffs()
    assert [
        [c.name for c in spans.children(h) if c.name != sc.SPAN_LOCK_WAIT] for h in (enter, back)
    ] == list(WHOLE)
    livekit_spans = theirs.get_finished_spans()
    known = {s.context.span_id for s in livekit_spans}
    updates = [s for s in livekit_spans if s.name == UPDATE_AGENT_SPAN]
    assert len(updates) == (2 if FEATURES.update_agent_span else 0)
    assert all(s.parent is not None and s.parent.span_id in known for s in updates)


class _TracerProbe(SpanProcessor):
    """Notes, as each span starts, whether a start_span of ours shadows LiveKit's tracer's."""

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.seen: list[tuple[str, bool]] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.seen.append((span.name, "start_span" in vars(self.tracer)))


async def test_livekits_tracer_is_ours_only_while_a_handoff_waits_for_its_span(
    instrument: Callable[..., Any], livekit_provider: Callable[[Any], None]
) -> None:
    """Every span LiveKit starts (each turn's, each handoff's) passes by nothing of ours: its
    tracer is not wrapped, and only shadowed from a handoff's start to its update_agent span."""
    if not FEATURES.update_agent_span:
        pytest.skip("LiveKit's own update_agent span is 1.8.2+")
    tracer = session_tracer()
    probe, exporter = _TracerProbe(tracer), InMemorySpanExporter()
    shared = TracerProvider()
    shared.add_span_processor(probe)
    shared.add_span_processor(SimpleSpanProcessor(exporter))
    livekit_provider(shared)
    instrumentor = instrument(LiveKitHandoffInstrumentor, tracer_provider=shared)
    method = type(tracer).start_span
    assert not hasattr(method, "__wrapped__") and "start_span" not in vars(tracer)
    await enter_and_return()
    # shadowed at no span's start (not even update_agent's: ours lets go as it calls LiveKit's) ...
    assert {name for name, _ in probe.seen} >= {"llm_node", "on_enter", UPDATE_AGENT_SPAN}
    assert [name for name, ours in probe.seen if ours] == []
    assert "start_span" not in vars(tracer)
    # ... yet there at each handoff's update_agent, which it put under the agent_handoff
    everything = exporter.get_finished_spans()
    updates = [s for s in everything if s.name == UPDATE_AGENT_SPAN]
    handoffs = {s.context.span_id for s in everything if s.name == sc.SPAN_HANDOFF}
    assert len(updates) == 2 and all(s.parent.span_id in handoffs for s in updates)
    instrumentor.uninstrument()
    assert type(tracer).start_span is method and "start_span" not in vars(tracer)
