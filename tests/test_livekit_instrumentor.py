"""The instrumentor itself: patching, restoring, and staying invisible to the host app."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from livekit.agents import AgentSession, llm, stt
from livekit.agents.voice import agent_activity, agent_session, events, generation
from lk_agents import UPDATE_AGENT_PHASES, Billing, Support, Triage
from opentelemetry import trace
from support import Spans, recorded_warnings
from wrapt import FunctionWrapper

from otel_handoff.cli.offline.livekit import IdleRealtimeModel, IdleRealtimeSession, ScriptedLLM
from otel_handoff.core import schema as sc
from otel_handoff.livekit import LiveKitHandoffInstrumentor
from otel_handoff.livekit._features import detect
from otel_handoff.livekit._handoff import LiveKitHandoff

FEATURES = detect()

PATCHED = [
    (agent_session.AgentSession, "__init__"),
    (agent_session.AgentSession, "update_agent"),
    (agent_session.AgentSession, "_update_activity"),
    (agent_activity.AgentActivity, "__init__"),
    (agent_activity.AgentActivity, "drain"),
    (agent_activity.AgentActivity, "pause"),
    (agent_activity.AgentActivity, "aclose"),
    (agent_activity.AgentActivity, "start"),
    (agent_activity.AgentActivity, "resume"),
    (agent_activity.AgentActivity, "_create_speech_task"),
    (generation, "make_tool_output"),
    (agent_session.AgentSession, "_update_agent_state"),
]
if FEATURES.reuse:
    PATCHED.append((agent_activity.AgentActivity, "_detach_reusable_resources"))
if FEATURES.connection_metrics:
    PATCHED += [
        (llm.RealtimeSession, "_report_connection_acquired"),
        (stt.RecognizeStream, "_report_connection_acquired"),
    ]
if FEATURES.tool_handoff_after_update and FEATURES.update_output_hook:
    PATCHED.append((events.RunContext, "_make_update_output"))
if FEATURES.cancel_handoff_hook:
    PATCHED.append((events.FunctionToolsExecutedEvent, "cancel_agent_handoff"))


def current(owner: Any, name: str) -> Any:
    return owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)


def test_instrument_wraps_once_and_uninstrument_restores(provider: Any) -> None:
    originals = [current(owner, name) for owner, name in PATCHED]
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    instrumentor.instrument(tracer_provider=provider)  # idempotent
    try:
        for (owner, name), original in zip(PATCHED, originals, strict=True):
            patched = current(owner, name)
            assert isinstance(patched, FunctionWrapper), name
            assert patched.__wrapped__ is original, f"{name} wrapped twice"
    finally:
        instrumentor.uninstrument()
    for (owner, name), original in zip(PATCHED, originals, strict=True):
        assert current(owner, name) is original, name
    # lower bound only: the release after the tested ones is instrumented when every wrap point holds
    assert instrumentor.instrumentation_dependencies() == ("livekit-agents >= 1.2.18",)


async def test_no_spans_after_uninstrument(provider: Any, spans: Spans) -> None:
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    instrumentor.uninstrument()
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Triage())
    session.update_agent(Billing())
    await session._update_activity_atask
    await session.aclose()
    assert not spans.handoffs()
    assert isinstance(session.current_agent, Billing)


async def test_realtime_session_classes_patched_on_first_sight_are_restored(provider: Any) -> None:
    if not FEATURES.reuse:
        pytest.skip("no realtime session reuse before livekit-agents 1.5.3")
    originals = {name: IdleRealtimeSession.__dict__[name] for name in ("update_chat_ctx", "update_options")}
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        session = AgentSession(llm=IdleRealtimeModel(mutable=True))
        await session.start(agent=Billing())
        session.update_agent(Support())
        await session._update_activity_atask
        await session.aclose()
        assert isinstance(IdleRealtimeSession.__dict__["update_chat_ctx"], FunctionWrapper)
    finally:
        instrumentor.uninstrument()
    for name, original in originals.items():
        assert IdleRealtimeSession.__dict__[name] is original, name


async def _handoff_and_observe(tool_calls: list[str], provider: Any) -> dict[str, Any]:
    """What a host app can observe of a session: history, events, current spans, agent."""
    tracer = provider.get_tracer("app")
    events: list[str] = []
    session = AgentSession(llm=ScriptedLLM(tool_calls=tool_calls))
    for name in ("agent_state_changed", "conversation_item_added", "function_tools_executed"):
        session.on(name, lambda ev, name=name: events.append(name))
    await session.start(agent=Triage())
    with tracer.start_as_current_span("app") as app_span:
        result = await session.run(user_input="help")
        seen_after_run = trace.get_current_span() is app_span
        session.update_agent(Support())
        seen_after_update = trace.get_current_span() is app_span
        await session._update_activity_atask
    observed = {
        "agent": type(session.current_agent).__name__,
        "history": [(item.type, getattr(item, "role", None)) for item in session.history.items],
        "events": events,
        "run_events": [type(ev).__name__ for ev in result.events],
        "current_span_kept": (seen_after_run, seen_after_update),
    }
    await session.aclose()
    return observed


@pytest.mark.parametrize("tool_calls", [["transfer"], ["ask_email"]])
async def test_host_app_sees_no_difference(
    provider: Any, plain_and_traced: Any, spans: Spans, tool_calls: list[str]
) -> None:
    async def observe() -> tuple[dict[str, Any], list[Any]]:
        with recorded_warnings() as found:  # category, message, filename and line
            observed = await _handoff_and_observe(tool_calls, provider)
        return observed, found

    plain, traced = await plain_and_traced(observe)
    assert traced == plain
    assert len(spans.handoffs()) >= 2


async def test_fault_in_our_code_is_contained(
    instrumented: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, open_spans: Any
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise AttributeError("'AgentActivity' object has no attribute 'agent'")  # a future release

    monkeypatch.setattr(LiveKitHandoff, "begin_phase", broken)
    caplog.set_level(logging.ERROR, logger="otel_handoff")
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Triage())
    for agent in (Billing(), Support()):
        session.update_agent(agent)
        await session._update_activity_atask
        assert session.current_agent is agent
    await session.aclose()

    reports = [r for r in caplog.records if r.name == "otel_handoff"]
    assert len(reports) == 1, "a fault is logged once, not per handoff"
    assert "please report" in reports[0].getMessage().lower()
    handoffs = instrumented.handoffs()
    assert [h.attributes[sc.OUTCOME] for h in handoffs] == ["completed", "completed"]
    assert not open_spans.ours()


def test_instrument_is_all_or_nothing(
    provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrap point a future release renamed: nothing stays patched, one error line, no raise."""
    import otel_handoff.livekit as instrumentation

    real_points = instrumentation._wrap_points

    def with_a_renamed_method(telemetry: Any) -> list[Any]:
        renamed = ("livekit.agents.voice.agent_session", "AgentSession.renamed_in_2_0", lambda *a: None)
        return [*real_points(telemetry), renamed]

    monkeypatch.setattr(instrumentation, "_wrap_points", with_a_renamed_method)
    originals = [current(owner, name) for owner, name in PATCHED]
    caplog.set_level(logging.ERROR, logger="otel_handoff")
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert [current(owner, name) for owner, name in PATCHED] == originals
        (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert "AgentSession.renamed_in_2_0" in line and "Install a tested release" in line
    finally:
        instrumentor.uninstrument()


async def test_span_ends_even_when_summarizing_fails(
    instrumented: Spans, monkeypatch: pytest.MonkeyPatch, open_spans: Any
) -> None:
    def broken(self: Any) -> None:
        raise KeyError("a field a future release dropped")

    monkeypatch.setattr(LiveKitHandoff, "_summarize", broken)
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Triage())
    session.update_agent(Billing())
    await session._update_activity_atask
    assert isinstance(session.current_agent, Billing)
    await session.aclose()
    assert len(instrumented.handoffs()) == 1
    assert not open_spans.ours()


class _DropHandoffs:
    """A sampler that drops the handoff span and keeps everything else (not parent-based)."""

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any) -> Any:
        from opentelemetry.sdk.trace.sampling import Decision, SamplingResult

        return SamplingResult(Decision.DROP if name == sc.SPAN_HANDOFF else Decision.RECORD_AND_SAMPLE)

    def get_description(self) -> str:
        return "DropHandoffs"


@pytest.mark.parametrize("sampled", [True, False])
async def test_a_sampled_out_handoff_makes_no_child_spans(sampled: bool) -> None:
    """Its children would be orphans: none are made (on_enter's neither); a kept handoff has all."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON if sampled else _DropHandoffs())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Triage())
        session.update_agent(Billing())
        await session._update_activity_atask
        await session._activity._on_enter_task
        assert isinstance(session.current_agent, Billing)
        await session.aclose()
    finally:
        instrumentor.uninstrument()
    names = sorted(s.name for s in exporter.get_finished_spans() if s.name.startswith(sc.SPAN_HANDOFF))
    expected = [sc.SPAN_HANDOFF, *UPDATE_AGENT_PHASES]
    assert names == (sorted(expected) if sampled else [])
