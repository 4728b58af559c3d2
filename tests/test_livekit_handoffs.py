"""Handoff spans from a real livekit-agents AgentSession run offline (only model edges scripted)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import livekit.agents as livekit
import pytest
from livekit.agents import AgentSession
from lk_agents import UPDATE_AGENT_PHASES, Billing, CollectEmail, Support, Triage, failing, gated, slow
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from packaging.version import Version
from support import HANDOFF_ALWAYS, Spans

from otel_handoff.cli.offline.livekit import IdleRealtimeModel, ScriptedLLM, SilentSTT, settle
from otel_handoff.core import schema as sc
from otel_handoff.livekit._features import detect

FEATURES = detect()
needs_reuse = pytest.mark.skipif(not FEATURES.reuse, reason="resource reuse needs livekit-agents 1.5.3+")
needs_queue = pytest.mark.skipif(not FEATURES.queue_wait, reason="no queued handoffs before 1.2.1")

HOLD = 0.05  # seconds a test keeps a lock or a hook busy: the work measured, not a synchronisation


@contextlib.asynccontextmanager
async def running(agent: Any, **session_kwargs: Any) -> AsyncIterator[AgentSession]:
    session = AgentSession(**{"llm": ScriptedLLM(), **session_kwargs})
    await session.start(agent=agent)
    try:
        yield session
    finally:
        await session.aclose()


def check_schema(span: ReadableSpan) -> dict[str, Any]:
    """Every always-present attribute is there, and the durations add up."""
    attrs = dict(span.attributes)
    missing = [key for key in HANDOFF_ALWAYS if key not in attrs]
    assert not missing, f"missing {missing}"
    assert attrs[sc.GEN_AI_OPERATION_NAME] == "agent_handoff"
    assert attrs[sc.FRAMEWORK] == "livekit-agents"
    assert attrs[sc.FRAMEWORK_VERSION] == livekit.__version__
    leaving = sc.DRAIN_DURATION if attrs[sc.PREVIOUS_ACTIVITY] == "close" else sc.PAUSE_DURATION
    entering = sc.START_DURATION if attrs[sc.NEW_ACTIVITY] == "start" else sc.RESUME_DURATION
    # LiveKit's steps between them: the lock held before the old agent leaves, the switch after it
    phases = [
        attrs[leaving],
        attrs[entering],
        attrs.get(sc.PREPARE_DURATION, 0),
        attrs.get(sc.SWITCH_DURATION, 0),
    ]
    if attrs[sc.OUTCOME] == sc.OUTCOME_COMPLETED:
        assert sc.PREPARE_DURATION in attrs and sc.SWITCH_DURATION in attrs, attrs
    if attrs[sc.PREVIOUS_ACTIVITY] == "close":
        phases.append(attrs[sc.CLOSE_DURATION])
    else:
        assert sc.CLOSE_DURATION not in attrs
    for key, value in attrs.items():
        if key.endswith(".duration"):
            assert value >= 0, key
    assert attrs[sc.DURATION] == pytest.approx(sum(phases), abs=1e-6)
    assert span.end_time is not None
    return attrs


def child_names(spans: Spans, parent: ReadableSpan) -> list[str]:
    """Phases in the order they end, LiveKit's spans standing for some on 1.8.2+; lock waits are
    left out (whether one happens varies by release). By their ends: a phase LiveKit's span stands
    for is drawn ending where that span ends, a little before our wrapper's end, so it can start
    before the short step of ours that came before it (the switch to a resume)."""
    phases = sorted(spans.phases(parent), key=lambda s: s.end_time)
    return [s.name for s in phases if s.name != sc.SPAN_LOCK_WAIT]


def stood_for(spans: Spans, handoff: ReadableSpan, phase: Any) -> bool:
    """Is ``phase`` one that LiveKit's own span stood for (under the handoff, not sent by us)?"""
    return phase not in spans.children(handoff)


async def test_tool_transfer(instrumented: Spans, open_spans: Any) -> None:
    llm = ScriptedLLM(tool_calls=["transfer"])
    async with running(Triage(), llm=llm) as session:
        await session.run(user_input="I have a billing question")
        await settle(session)
        assert isinstance(session.current_agent, Billing)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.TRIGGER] == "tool"
    assert attrs[sc.GEN_AI_TOOL_NAME] == "transfer"
    assert attrs[sc.GEN_AI_TOOL_CALL_ID] == "call_1"
    assert attrs[sc.FROM_AGENT_NAME] == Triage().label
    assert attrs[sc.TO_AGENT_NAME] == Billing().label
    assert (attrs[sc.PREVIOUS_ACTIVITY], attrs[sc.NEW_ACTIVITY]) == ("close", "start")
    assert attrs[sc.OUTCOME] == "completed"
    assert attrs[sc.SEQUENCE] == 1
    assert attrs[sc.QUEUE_WAIT_DURATION] == 0 and attrs[sc.LOCK_WAIT_DURATION] == 0
    assert child_names(instrumented, handoff) == UPDATE_AGENT_PHASES
    assert handoff.kind == trace.SpanKind.INTERNAL

    # same trace as LiveKit's own spans, linked to the function_tool span the tool ran in; the
    # turn that asked for it ended first, so it sits under the turn's parent, linked to the turn
    [session_span] = instrumented.named("agent_session")
    assert handoff.context.trace_id == session_span.context.trace_id
    [tool_span] = instrumented.named("function_tool")
    tool_link, turn_link = (link.context.span_id for link in handoff.links)
    assert tool_link == tool_span.context.span_id
    turn = instrumented.by_id(turn_link)
    assert turn is not None and turn.end_time < handoff.end_time
    assert handoff.parent.span_id == turn.parent.span_id
    assert not open_spans.ours()


async def test_update_agent_from_code_links_the_caller_span(instrumented: Spans, provider: Any) -> None:
    """The app's span around update_agent() ends before the handoff does: the handoff goes under
    that span's parent (LiveKit's agent_session here), linked to it, never past its parent's end."""
    tracer = provider.get_tracer("app")
    async with running(Triage()) as session:
        with tracer.start_as_current_span("caller") as caller:
            session.update_agent(Support())
            assert trace.get_current_span() is caller
        await settle(session)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.TRIGGER] == "api"
    assert sc.GEN_AI_TOOL_NAME not in attrs
    assert attrs[sc.TO_AGENT_NAME] == Support().label
    if caller.parent is not None:  # 1.3+: LiveKit's session span is current for the app's code
        assert [link.context.span_id for link in handoff.links] == [caller.get_span_context().span_id]
        assert handoff.parent.span_id == caller.parent.span_id
    else:  # a root has nothing above it: the handoff stays under it
        assert not handoff.links and handoff.parent.span_id == caller.get_span_context().span_id
    for child in instrumented.children(handoff):
        assert child.context.trace_id == handoff.context.trace_id


async def test_agent_task_enter_and_return(instrumented: Spans) -> None:
    llm = ScriptedLLM(tool_calls=["ask_email"])
    async with running(Triage(), llm=llm) as session:
        await session.run(user_input="take my email")
        await settle(session)
        assert isinstance(session.current_agent, Triage)

    enter, back = instrumented.handoffs()
    enter_attrs, back_attrs = check_schema(enter), check_schema(back)
    assert enter_attrs[sc.TRIGGER] == back_attrs[sc.TRIGGER] == "task"
    assert (enter_attrs[sc.PREVIOUS_ACTIVITY], enter_attrs[sc.NEW_ACTIVITY]) == ("pause", "start")
    assert (back_attrs[sc.PREVIOUS_ACTIVITY], back_attrs[sc.NEW_ACTIVITY]) == ("close", "resume")
    assert enter_attrs[sc.TO_AGENT_NAME] == back_attrs[sc.FROM_AGENT_NAME]
    assert enter_attrs[sc.TO_AGENT_NAME] == CollectEmail().label
    assert back_attrs[sc.TO_AGENT_NAME] == Triage().label
    assert (enter_attrs[sc.SEQUENCE], back_attrs[sc.SEQUENCE]) == (1, 2)
    # an AgentTask hands off in the tool's own task: no task of its own waits for the loop
    assert child_names(instrumented, enter) == [
        sc.SPAN_PREPARE,
        sc.SPAN_PAUSE,
        sc.SPAN_SWITCH,
        sc.SPAN_START,
        sc.SPAN_LOOP_WAIT,
        sc.SPAN_ON_ENTER,
    ]
    assert child_names(instrumented, back) == [
        sc.SPAN_PREPARE,
        sc.SPAN_DRAIN,
        sc.SPAN_CLOSE,
        sc.SPAN_SWITCH,
        sc.SPAN_RESUME,
    ]


@needs_queue
async def test_back_to_back_update_agent_queues(instrumented: Spans) -> None:
    async with running(Triage(exit=slow(HOLD))) as session:
        session.update_agent(Billing())
        session.update_agent(Support())
        await settle(session)
        assert isinstance(session.current_agent, Support)

    first, second = instrumented.handoffs()
    first_attrs, second_attrs = check_schema(first), check_schema(second)
    assert first_attrs[sc.QUEUE_WAIT_DURATION] == 0
    assert second_attrs[sc.QUEUE_WAIT_DURATION] >= HOLD  # waited for the first, slow drain
    assert sc.SPAN_QUEUE_WAIT not in child_names(instrumented, first)
    [queue] = instrumented.children(second, sc.SPAN_QUEUE_WAIT)
    assert (queue.end_time - queue.start_time) / 1e9 == pytest.approx(second_attrs[sc.QUEUE_WAIT_DURATION])
    # "from" is the agent actually drained, not the one current when it was requested
    assert second_attrs[sc.FROM_AGENT_NAME] == Billing().label
    assert_waits_outside_phases(second)


def assert_waits_outside_phases(handoff: Any) -> None:
    """Phases, queue wait and lock wait are disjoint parts of the span: counted twice, they would
    add up to more than its wall time (whatever the machine's load)."""
    attrs = handoff.attributes
    waits = attrs[sc.QUEUE_WAIT_DURATION] + attrs[sc.LOCK_WAIT_DURATION]
    assert attrs[sc.DURATION] + waits <= (handoff.end_time - handoff.start_time) / 1e9 + 1e-6


async def test_contended_session_lock(instrumented: Spans) -> None:
    async with running(Triage()) as session:
        lock = session._activity_lock
        async with lock:
            session.update_agent(Billing())
            for _ in range(1000):  # bounded: let the handoff task reach the lock
                if lock._waiters:
                    break
                await asyncio.sleep(0)
            assert lock._waiters, "the handoff never waited on the session lock"
            await asyncio.sleep(HOLD)  # the contention being measured
        await settle(session)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.LOCK_WAIT_DURATION] >= HOLD
    [wait] = instrumented.children(handoff, sc.SPAN_LOCK_WAIT)
    assert wait.attributes[sc.LOCK] == "session"
    assert_waits_outside_phases(handoff)  # phases exclude the lock wait
    [drain] = instrumented.phases(handoff, sc.SPAN_DRAIN)
    assert drain.start_time >= wait.end_time


async def test_slow_on_exit_is_in_drain(instrumented: Spans) -> None:
    async with running(Triage(exit=slow(HOLD))) as session:
        session.update_agent(Billing())
        await settle(session)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.DRAIN_DURATION] >= HOLD
    assert attrs[sc.DURATION] >= HOLD
    [drain] = instrumented.phases(handoff, sc.SPAN_DRAIN)
    assert (drain.end_time - drain.start_time) / 1e9 >= HOLD


async def test_slow_on_enter_ends_the_handoff(instrumented: Spans) -> None:
    """The start schedules on_enter: the handoff ends when it does, so no phase outlives its span
    (Jaeger warns of such a child); its time is the span's, not agent_handoff.duration's (work)."""
    async with running(Triage()) as session:
        session.update_agent(Billing(enter=slow(HOLD)))
        await settle(session)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    [on_enter] = instrumented.phases(handoff, sc.SPAN_ON_ENTER)
    assert on_enter.attributes[sc.ON_ENTER_DURATION] >= HOLD
    # ours ends with the handoff; LiveKit's (1.8.2+: it stands for ours) just before
    assert on_enter.end_time == handoff.end_time or stood_for(instrumented, handoff, on_enter)
    assert attrs[sc.DURATION] < HOLD <= (handoff.end_time - handoff.start_time) / 1e9
    assert on_enter.status.status_code is StatusCode.UNSET


async def test_on_enter_exception(instrumented: Spans) -> None:
    async with running(Triage()) as session:
        # an error that quotes the caller, as LLM provider errors echoing the prompt do
        session.update_agent(Billing(enter=failing(ValueError("caller said: my card is 4111"))))
        await settle(session)
        assert isinstance(session.current_agent, Billing)

    [handoff] = instrumented.handoffs()
    assert check_schema(handoff)[sc.OUTCOME] == "completed"
    [on_enter] = instrumented.phases(handoff, sc.SPAN_ON_ENTER)
    assert on_enter.status.status_code is StatusCode.ERROR
    if not stood_for(instrumented, handoff, on_enter):  # else LiveKit's span says it, its own way
        assert on_enter.attributes[sc.ERROR_TYPE] == "ValueError"
        assert on_enter.status.description == "ValueError"  # the type, never the message
        assert on_enter.events == ()  # no exception event: its message and stack could quote the caller


@needs_reuse
@pytest.mark.parametrize(("mutable", "reused", "sessions"), [(True, True, 1), (False, False, 2)])
async def test_realtime_session_reuse(
    instrumented: Spans, mutable: bool, reused: bool, sessions: int
) -> None:
    model = IdleRealtimeModel(mutable=mutable)
    async with running(Billing("You are A."), llm=model) as session:
        session.update_agent(Support("You are B."))
        await settle(session)
        assert len(model.sessions) == sessions

    [handoff] = instrumented.handoffs()
    assert check_schema(handoff)[sc.REALTIME_SESSION_REUSED] is reused


@needs_reuse
@pytest.mark.parametrize("shared", [True, False])
async def test_stt_reuse(instrumented: Spans, shared: bool) -> None:
    common = SilentSTT()
    per_agent = {} if shared else {"stt": SilentSTT()}
    async with running(Billing(**per_agent), stt=common) as session:
        session.update_agent(Support(**({} if shared else {"stt": SilentSTT()})))
        await settle(session)

    [handoff] = instrumented.handoffs()
    assert check_schema(handoff)[sc.STT_REUSED] is shared


async def test_session_close_during_handoff(
    instrumented: Spans, open_spans: Any, caplog: pytest.LogCaptureFixture
) -> None:
    exiting, release = asyncio.Event(), asyncio.Event()
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Triage(exit=gated(exiting, release)))
    session.update_agent(Billing())
    await exiting.wait()
    closing = asyncio.create_task(session.aclose())
    for _ in range(1000):  # bounded: let aclose() mark the session closing while the drain is blocked
        if session._closing:
            break
        await asyncio.sleep(0)
    assert session._closing
    release.set()
    await closing
    await asyncio.gather(session._update_activity_atask, return_exceptions=True)

    # livekit-agents 1.3+ skips starting the new activity (and says so); 1.2 still starts it
    skipped = "session is closing, skipping" in caplog.text
    assert skipped or livekit.__version__.startswith("1.2.")
    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.OUTCOME] == ("skipped" if skipped else "completed")
    assert (sc.SPAN_START in child_names(instrumented, handoff)) is not skipped
    assert not open_spans.ours()


async def test_sequence_counts_per_session(instrumented: Spans) -> None:
    for _ in range(2):
        async with running(Triage()) as session:
            session.update_agent(Billing())
            await settle(session)
            session.update_agent(Support())
            await settle(session)
    assert [h.attributes[sc.SEQUENCE] for h in instrumented.handoffs()] == [1, 1, 2, 2]


async def test_handoff_requested_outside_any_trace_joins_the_session_trace(instrumented: Spans) -> None:
    import contextvars

    async with running(Triage()) as session:

        async def from_elsewhere() -> None:  # e.g. a webhook handler with no span of its own
            session.update_agent(Billing())

        # a task started from an empty context (create_task's `context=` needs Python 3.11)
        await contextvars.Context().run(asyncio.create_task, from_elsewhere())
        await settle(session)

    [handoff] = instrumented.handoffs()
    [session_span] = instrumented.named("agent_session")
    assert handoff.context.trace_id == session_span.context.trace_id
    assert handoff.parent.span_id == session_span.context.span_id


# --- the conversation ---------------------------------------------------------------------------
class _FakeJobContext:
    """What LiveKit reads for gen_ai.conversation.id (``get_job_context(required=False).job.room.sid``)."""

    class job:
        class room:
            sid = "RM_conversation_test"

    _redaction_enabled = False  # LiveKit's own span processor asks

    def simulation_context(self) -> None:  # 1.8 asks whether the job is a simulation: it is not
        return None


@pytest.mark.parametrize("in_job", [True, False])
async def test_conversation_id_is_livekits_own(instrumented: Spans, in_job: bool) -> None:
    """Inside a job: the room sid, as LiveKit stamps its own spans (1.8+); outside one: absent."""
    from livekit.agents import job

    async with running(Triage()) as session:
        # set once the session runs (its start reads more of a real job than this fake has)
        token = job._JobContextVar.set(_FakeJobContext()) if in_job else None  # type: ignore[arg-type]
        try:
            session.update_agent(Billing())
            await settle(session)
        finally:
            if token is not None:
                job._JobContextVar.reset(token)
    [handoff] = instrumented.handoffs()
    livekits = [
        s
        for s in instrumented.all()
        if s.context.trace_id == handoff.context.trace_id
        and not s.instrumentation_scope.name.startswith("otel_handoff")
        and sc.GEN_AI_CONVERSATION_ID in (s.attributes or {})
    ]
    if not in_job:
        assert sc.GEN_AI_CONVERSATION_ID not in handoff.attributes
        assert livekits == []  # LiveKit does not make one up either
        return
    assert handoff.attributes[sc.GEN_AI_CONVERSATION_ID] == "RM_conversation_test"
    if Version(FEATURES.version) >= Version("1.8"):  # LiveKit stamps its own spans from 1.8
        assert livekits, "LiveKit's own spans in the handoff's trace carry the conversation id"
        assert {s.attributes[sc.GEN_AI_CONVERSATION_ID] for s in livekits} == {"RM_conversation_test"}
