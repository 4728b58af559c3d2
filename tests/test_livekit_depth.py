"""Handoff depth: reuse reasons, realtime reconfiguration, reconnects, first speech, rejections."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from livekit.agents import AgentSession, llm
from lk_agents import Billing, CustomSTTNode, Support, Triage, WithTools, transfer_after_update
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from support import Spans

from otel_handoff.cli.offline.livekit import IdleRealtimeModel, ScriptedLLM, SilentSTT
from otel_handoff.core import schema as sc
from otel_handoff.livekit._features import detect

FEATURES = detect()
needs_reuse = pytest.mark.skipif(not FEATURES.reuse, reason="resource reuse needs livekit-agents 1.5.3+")
needs_metrics = pytest.mark.skipif(
    not FEATURES.connection_metrics, reason="acquire_time metrics need livekit-agents 1.5.17+"
)
needs_rejection = pytest.mark.skipif(
    FEATURES.tool_handoff_after_update != "rejected", reason="this release does not reject such handoffs"
)
CONNECT = 0.1  # seconds a scripted connection takes


async def handoff_once(first: Any, second: Any, **session_kwargs: Any) -> AgentSession:
    """Start `first`, hand off to `second` with update_agent(), wait for it; returns the open session."""
    session = AgentSession(**{"llm": ScriptedLLM(), **session_kwargs})
    await session.start(agent=first)
    session.update_agent(second)
    await session._update_activity_atask
    return session


def only_handoff(spans: Spans) -> ReadableSpan:
    [handoff] = spans.handoffs()
    return handoff


def linked_to(spans: Spans, name: str, handoff: ReadableSpan) -> list[ReadableSpan]:
    return [
        s
        for s in spans.named(name)
        if [link.context.span_id for link in s.links] == [handoff.context.span_id]
    ]


# --- why reuse did or didn't happen ----------------------------------------------------------------
@needs_reuse
async def test_realtime_reused_with_mutable_model_times_each_update(instrumented: Spans) -> None:
    model = IdleRealtimeModel(mutable=True, update_delay=0.01)
    session = await handoff_once(Billing("You are A."), Support("You are B."), llm=model)
    await session.aclose()

    handoff = only_handoff(instrumented)
    assert handoff.attributes[sc.REALTIME_SESSION_REUSED] is True
    assert list(handoff.attributes[sc.REALTIME_REUSE_BLOCKED_BY]) == []
    updates = instrumented.children(handoff, sc.SPAN_REALTIME_UPDATE)
    kinds = [u.attributes[sc.REALTIME_UPDATE_KIND] for u in updates]
    assert sorted(kinds) == ["chat_ctx", "instructions", "tools"]
    for update in updates:
        assert update.attributes[sc.REALTIME_UPDATE_DURATION] >= 0.01
        assert update.status.status_code is StatusCode.UNSET
    [start] = instrumented.phases(handoff, sc.SPAN_START)
    assert all(start.start_time <= u.start_time and u.end_time <= start.end_time for u in updates)


@needs_reuse
@pytest.mark.parametrize(
    ("first", "second", "same_model", "reason"),
    [
        (lambda: Billing("You are A."), lambda: Support("You are B."), True, "instructions"),
        (lambda: Billing(), lambda: WithTools(), True, "tools"),
        (lambda: Billing(), lambda: Support(), False, "model"),
    ],
    ids=["instructions", "tools", "model"],
)
async def test_realtime_not_reused_says_why(
    instrumented: Spans, first: Any, second: Any, same_model: bool, reason: str
) -> None:
    model = IdleRealtimeModel(mutable=False)
    new_agent = second() if same_model else type(second())(llm=IdleRealtimeModel(mutable=False))
    session = await handoff_once(first(), new_agent, llm=model)
    await session.aclose()

    handoff = only_handoff(instrumented)
    assert handoff.attributes[sc.REALTIME_SESSION_REUSED] is False
    assert list(handoff.attributes[sc.REALTIME_REUSE_BLOCKED_BY]) == [reason]
    assert not instrumented.children(handoff, sc.SPAN_REALTIME_UPDATE)


@needs_reuse
@pytest.mark.parametrize(
    ("make_second", "per_agent_stt", "reasons"),
    [
        (Support, False, []),
        (Support, True, ["stt_instance"]),
        (CustomSTTNode, False, ["stt_node"]),
    ],
    ids=["shared", "per-agent-instance", "stt_node-override"],
)
async def test_stt_reuse_reasons(
    instrumented: Spans, make_second: Any, per_agent_stt: bool, reasons: list[str]
) -> None:
    extra = {"stt": SilentSTT()} if per_agent_stt else {}
    session = await handoff_once(Billing(), make_second(**extra), stt=SilentSTT())
    await session.aclose()

    handoff = only_handoff(instrumented)
    assert handoff.attributes[sc.STT_REUSED] is (not reasons)
    assert list(handoff.attributes[sc.STT_REUSE_BLOCKED_BY]) == reasons


# --- reconfiguring a reused realtime session ----------------------------------------------------
@needs_reuse
@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (llm.RealtimeError("provider refused the chat context"), "RealtimeError"),
        (llm.RealtimeError("update_chat_ctx timed out."), "timeout"),  # how providers report it
    ],
    ids=["raises", "times-out"],
)
async def test_failed_realtime_update(instrumented: Spans, error: Exception, error_type: str) -> None:
    model = IdleRealtimeModel(mutable=True, update_delay=0.02, update_errors={"chat_ctx": error})
    session = await handoff_once(Billing("You are A."), Support("You are B."), llm=model)
    arrived = isinstance(session.current_agent, Support) and session._activity._started
    await session.aclose()

    handoff = only_handoff(instrumented)
    [failed] = [
        u
        for u in instrumented.children(handoff, sc.SPAN_REALTIME_UPDATE)
        if u.attributes[sc.REALTIME_UPDATE_KIND] == "chat_ctx"
    ]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[sc.ERROR_TYPE] == error_type
    assert failed.attributes[sc.REALTIME_UPDATE_DURATION] >= 0.02
    assert failed.events == ()  # error.type only: one error convention for every span
    # the handoff's own outcome is what the framework did with the error (1.8 logs and goes on)
    assert handoff.attributes[sc.OUTCOME] == ("completed" if arrived else "error")


# --- the replacement connection -----------------------------------------------------------------
@needs_metrics
async def test_realtime_reconnect_is_measured(instrumented: Spans) -> None:
    fresh = IdleRealtimeModel(connect_delay=CONNECT)
    session = await handoff_once(Billing(), Support(llm=fresh), llm=IdleRealtimeModel())
    await fresh.sessions[0]._connected.wait()
    await session.aclose()

    handoff = only_handoff(instrumented)
    [reconnect] = linked_to(instrumented, sc.SPAN_RECONNECT, handoff)
    assert reconnect.attributes[sc.RECONNECT_RESOURCE] == "realtime_session"
    measured = reconnect.attributes[sc.RECONNECT_DURATION]
    # the session's own measure of its connection (a sleep of CONNECT, however late it woke), not ours
    assert measured == pytest.approx(fresh.sessions[0].acquire_time, abs=1e-6)
    assert measured >= CONNECT
    assert (reconnect.end_time - reconnect.start_time) / 1e9 == pytest.approx(measured, abs=1e-6)
    assert reconnect.context.trace_id == handoff.context.trace_id


@needs_metrics
async def test_stt_reconnect_is_measured(instrumented: Spans) -> None:
    fresh = SilentSTT(connect_delay=CONNECT)
    connected = asyncio.Event()
    reported: list[float] = []  # the STT's own acquire_time metric: what the span must carry

    def collected(metrics: Any) -> None:
        reported.append(metrics.acquire_time)
        connected.set()

    fresh.on("metrics_collected", collected)
    session = await handoff_once(Billing(), Support(stt=fresh), stt=SilentSTT())
    await asyncio.wait_for(connected.wait(), 5)
    await session.aclose()

    handoff = only_handoff(instrumented)
    [reconnect] = linked_to(instrumented, sc.SPAN_RECONNECT, handoff)
    assert reconnect.attributes[sc.RECONNECT_RESOURCE] == "stt"
    # the framework's measure of the connection, not ours: a sleep of CONNECT, however late it woke
    assert reported[-1] >= CONNECT
    assert reconnect.attributes[sc.RECONNECT_DURATION] == pytest.approx(reported[-1], abs=1e-6)


@needs_reuse
async def test_no_reconnect_when_reused(instrumented: Spans) -> None:
    model = IdleRealtimeModel(connect_delay=CONNECT)
    session = await handoff_once(Billing(), Support(), llm=model)
    await session.aclose()
    assert not instrumented.named(sc.SPAN_RECONNECT)


# --- first speech after the handoff -------------------------------------------------------------
async def greet(agent: Any) -> None:
    agent.session.generate_reply(instructions="greet")


async def test_first_speech_after_tool_transfer(instrumented: Spans) -> None:
    speaking = asyncio.Event()
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    session.on("agent_state_changed", lambda ev: ev.new_state == "speaking" and speaking.set())
    await session.start(agent=Triage(next_agent=lambda: Billing(enter=greet)))
    await session.run(user_input="billing please")
    await asyncio.wait_for(speaking.wait(), 5)
    await session.aclose()

    handoff = only_handoff(instrumented)
    assert handoff.attributes[sc.TRIGGER] == "tool"
    [first] = linked_to(instrumented, sc.SPAN_FIRST_SPEECH, handoff)
    delay = first.attributes[sc.FIRST_SPEECH_DELAY]
    assert first.start_time == handoff.start_time
    assert delay == pytest.approx((first.end_time - first.start_time) / 1e9, abs=1e-6)
    assert delay >= handoff.attributes[sc.DURATION]


async def test_no_first_speech_when_new_agent_stays_silent(instrumented: Spans) -> None:
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    await session.start(agent=Triage(next_agent=Support))
    await session.run(user_input="billing please")
    await session.aclose()
    assert len(instrumented.handoffs()) == 1
    assert not instrumented.named(sc.SPAN_FIRST_SPEECH)


# --- an Agent returned after ctx.update() --------------------------------------------------------
def late_transfer_tools(where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(session kwargs, first-agent kwargs) placing the tool in an AsyncToolset or on the agent."""
    if where == "async_toolset":
        from livekit.agents.llm.async_toolset import AsyncToolset

        return {"tools": [AsyncToolset(id="late", tools=[transfer_after_update])]}, {}
    return {}, {"tools": [transfer_after_update]}


@needs_rejection
@pytest.mark.parametrize("where", ["agent_tool", "async_toolset"])
async def test_agent_after_progress_update_is_rejected_visibly(instrumented: Spans, where: str) -> None:
    session_kwargs, agent_kwargs = late_transfer_tools(where)
    ended = asyncio.Event()
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer_after_update"]), **session_kwargs)
    session.on(
        "tool_execution_updated",
        lambda ev: ev.update.type == "tool_call_ended" and ended.set(),
    )
    await session.start(agent=Support(**agent_kwargs))
    await session.run(user_input="transfer me")
    await asyncio.wait_for(ended.wait(), 5)
    assert isinstance(session.current_agent, Support)  # the framework refused the handoff
    await session.aclose()

    handoff = only_handoff(instrumented)
    attrs = handoff.attributes
    assert attrs[sc.OUTCOME] == "rejected"
    assert handoff.status.status_code is StatusCode.ERROR
    assert attrs[sc.REJECTION_REASON] == "agent handoff after a progress update is not supported"
    assert attrs[sc.GEN_AI_TOOL_NAME] == "transfer_after_update"
    assert attrs[sc.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert attrs[sc.FROM_AGENT_NAME] == Support().label
    # 1.6.0 to 1.8.x before `_make_update_output` drop the returned agent before anyone sees it
    assert attrs[sc.TO_AGENT_NAME] == (Billing().label if FEATURES.update_output_hook else "")
    assert attrs[sc.TRIGGER] == "tool"
    [tool_span] = instrumented.named("function_tool")
    assert handoff.parent.span_id == tool_span.context.span_id


def test_no_release_defers_yet() -> None:
    """Deferral is detected from the executor's code, not assumed from a version."""
    assert FEATURES.tool_handoff_after_update in (None, "rejected")


# --- none of this changes what the framework does ------------------------------------------------
async def _observe(scenario: str) -> dict[str, Any]:
    events: list[str] = []
    kwargs: dict[str, Any] = {}
    first: Any = Billing("You are A.")
    second: Any = Support("You are B.")
    if scenario == "realtime_reuse":
        kwargs["llm"] = IdleRealtimeModel(mutable=True)
    elif scenario == "realtime_update_fails":
        kwargs["llm"] = IdleRealtimeModel(update_errors={"chat_ctx": llm.RealtimeError("timed out")})
    elif scenario == "realtime_immutable":
        kwargs["llm"] = IdleRealtimeModel(mutable=False)
    elif scenario == "stt_per_agent":
        kwargs["stt"], second = SilentSTT(), Support(stt=SilentSTT())
    session = AgentSession(**{"llm": ScriptedLLM(), **kwargs})
    for name in ("agent_state_changed", "conversation_item_added", "error", "close"):
        session.on(name, lambda ev, name=name: events.append(name))
    await session.start(agent=first)
    session.update_agent(second)
    error = None
    try:
        await session._update_activity_atask
    except Exception as exc:
        error = repr(exc)
    observed = {
        "agent": type(session.current_agent).__name__,
        "history": [(item.type, getattr(item, "role", None)) for item in session.history.items],
        "error": error,
    }
    await session.aclose()
    observed["events"] = events
    return observed


@needs_reuse
@pytest.mark.parametrize(
    "scenario", ["realtime_reuse", "realtime_update_fails", "realtime_immutable", "stt_per_agent"]
)
async def test_framework_behaviour_unchanged(plain_and_traced: Any, spans: Spans, scenario: str) -> None:
    plain, traced = await plain_and_traced(lambda: _observe(scenario))
    assert traced == plain
    assert len(spans.handoffs()) == 1
