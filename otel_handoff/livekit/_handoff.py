"""One LiveKit handoff in flight: its timings while it runs, its spans once it is over.

A handoff is traced without ever making our spans current: LiveKit replaces the current
OTel context inside ``_update_activity`` and user code must see the same current span as
without instrumentation. The handoff travels in a ``ContextVar`` instead. While it runs, the
wrappers only take timestamps into a :class:`HandoffRecord`; when it ends, the core emitter
makes its span and every child back to back with their real start and end times (a span made
in the middle of the framework's work costs about 1.6 times as much), so a cancelled or failed
phase never leaves one open. The new agent's ``on_enter``, scheduled by its start, is the last
phase: a handoff whose start scheduled it is emitted when on_enter ends, so no phase outlives it.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry.trace import Link, SpanContext

from ..core import crossing
from ..core import schema as sc
from ..core.emit import Emitted, emit, emit_late_phase, emit_linked, span_in
from ..core.faults import report
from ..core.heard import attributes as downlink_attributes
from ..core.record import CANCELLED, HandoffRecord, PhaseRecord, kept_error
from ._downlink import read_downlink

# the handoff whose `_update_activity` runs in this task
CURRENT_HANDOFF: ContextVar[LiveKitHandoff | None] = ContextVar("otel_handoff_livekit_current", default=None)
# a handoff requested by `update_agent()`, waiting for its task to reach `_update_activity`
PENDING_HANDOFF: ContextVar[LiveKitHandoff | None] = ContextVar("otel_handoff_livekit_pending", default=None)


def _no_agent() -> None:
    """Stands in for a weak reference when the new agent is unknown (a refused handoff)."""
    return None


def livekit_records(session: Any) -> bool:
    """Do LiveKit's own spans of ``session`` record (its session span, 1.8.2+, does)?"""
    root = getattr(session, "_root_span_context", None)
    theirs = span_in(root) if root is not None else None
    return theirs is not None and theirs.is_recording()


def agent_id(agent: Any) -> str:
    """`Agent.id` (1.3+); releases without it identify agents by label only."""
    return getattr(agent, "id", None) or agent.label


@dataclass(frozen=True)
class ToolCause:
    """The tool whose return value asked for a handoff."""

    name: str
    call_id: str
    span_context: SpanContext | None
    # a handoff the framework defers until the tool ends: requested at its progress update
    deferred_since_ns: int | None = None


class Reuse(NamedTuple):
    """Which expensive resources the framework handed to the new activity."""

    stt: bool = False
    realtime_session: bool = False
    turn_detector: bool = False


NOT_REUSED = Reuse()


class PhaseMark(NamedTuple):
    """A phase of this handoff that began: what its end needs."""

    phase: str
    start_ns: int
    lock_wait_before_ns: int
    reused: Reuse = NOT_REUSED


@functools.cache
def _modes(previous_activity: str, new_activity: str) -> dict[str, Any]:
    """The activity modes and a 0 for every duration they promise (a phase that ran overwrites it)."""
    closes = previous_activity == sc.CLOSE
    attributes: dict[str, Any] = {
        sc.PREVIOUS_ACTIVITY: previous_activity,
        sc.NEW_ACTIVITY: new_activity,
        sc.QUEUE_WAIT_DURATION: 0.0,
        sc.LOCK_WAIT_DURATION: 0.0,
        sc.DRAIN_DURATION if closes else sc.PAUSE_DURATION: 0.0,
    }
    if closes:
        attributes[sc.CLOSE_DURATION] = 0.0
    attributes[sc.START_DURATION if new_activity == sc.START else sc.RESUME_DURATION] = 0.0
    return attributes


class LiveKitHandoff:
    """State of one handoff, from its request to the new activity's start or resume."""

    __slots__ = (
        "_downlink_task",
        "_emitted",
        "_error",
        "_linked",
        "_old_activity",
        "_session",
        "_to_agent",
        "ended",
        "entered_ns",
        "from_agent",
        "left_ns",
        "livekit_open",
        "livekit_pending",
        "lock_end_ns",
        "lock_wait_ns",
        "new_activity",
        "on_enter_pending",
        "previous_activity",
        "queued",
        "realtime_blocked",
        "realtime_session",
        "record",
        "reused",
        "started_ns",
        "started_phases",
        "stt_blocked",
        "telemetry",
    )

    def __init__(
        self,
        telemetry: Any,
        session: Any,
        agent: Any,
        *,
        trigger: str,
        parent: otel_context.Context,
        sequence: int,
        queued: bool,
        tool: ToolCause | None = None,
        asked_in: SpanContext | None = None,
        conversation_id: str | None = None,
        previous_activity: str = sc.CLOSE,
        new_activity: str = sc.START,
    ) -> None:
        self.telemetry = telemetry
        self._session = weakref.ref(session)
        self._to_agent = weakref.ref(agent) if agent is not None else _no_agent
        self._old_activity: weakref.ref[Any] | None = None
        start_ns = tool.deferred_since_ns if tool and tool.deferred_since_ns else time.time_ns()
        self.queued = queued
        self.lock_wait_ns = 0
        self.lock_end_ns = 0  # the end of the last lock wait
        self.started_phases: set[str] = set()
        # where the steps between the phases begin: `_update_activity` entered, the old activity
        # left (its drain, close or pause ended), the new one started or resumed; 0 until then
        self.entered_ns = 0
        self.left_ns = 0
        self.started_ns = 0
        self.previous_activity = previous_activity
        self.new_activity = new_activity
        self.ended = False
        self.from_agent: tuple[str, str] | None = None  # (label, id)
        self.reused = NOT_REUSED
        self.stt_blocked: list[str] | None = None
        self.realtime_blocked: list[str] | None = None
        self.realtime_session: weakref.ref[Any] | None = None  # reused: its updates are timed
        self._error: BaseException | str | None = None
        self._emitted: Emitted | None = None  # once the span is made
        self._linked: list[PhaseRecord] = []  # linked spans that came before it was made
        self._downlink_task: asyncio.Task[None] | None = None  # held while the statistics come
        self.on_enter_pending = False  # the new agent's on_enter was scheduled by its start
        self.livekit_open = False  # LiveKit's update_agent, under our span, has not ended yet
        self.livekit_pending = False  # in `_update_activity`, LiveKit's update_agent not started yet
        self.record = HandoffRecord(
            start_ns=start_ns,
            end_ns=0,
            sequence=sequence,
            outcome=sc.OUTCOME_COMPLETED,
            parent=parent,
            to_agent=agent.label if agent is not None else "",
            to_agent_id=agent_id(agent) if agent is not None else "",
            trigger=trigger,
            conversation_id=conversation_id,
        )
        if tool is not None:
            self.record.tool_name = tool.name
            self.record.tool_call_id = tool.call_id
            if tool.span_context is not None and tool.span_context.is_valid:
                self.record.links = [Link(tool.span_context)]
        if asked_in is not None:  # a span of LiveKit's that ends first: linked, not the parent
            self.record.links = [*(self.record.links or ()), Link(asked_in)]

    @property
    def start_ns(self) -> int:
        return self.record.start_ns

    @property
    def span_context(self) -> SpanContext | None:
        return self._emitted.span_context if self._emitted is not None else None

    # --- the session ---------------------------------------------------------------
    def is_for(self, session: Any) -> bool:
        return self._session() is session

    def enters(self, agent: Any) -> bool:
        """Is ``agent`` the one this handoff hands the conversation to?"""
        return agent is self._to_agent()

    def leaves(self, activity: Any) -> bool:
        """Is ``activity`` the one this handoff drained or paused?"""
        return self._old_activity is not None and self._old_activity() is activity

    def bind(self, previous_activity: str, new_activity: str, *, requested: bool = False) -> None:
        """`_update_activity` was entered: the queue wait, if any, is over; else, for a handoff
        ``requested`` through `update_agent()`, its task's wait for the event loop."""
        self.previous_activity = previous_activity
        self.new_activity = new_activity
        self.entered_ns = now = time.time_ns()
        if self.queued:
            self.record.phases.append(PhaseRecord(sc.PHASE_QUEUE_WAIT, self.record.start_ns, now))
        elif requested:
            self.record.phases.append(PhaseRecord(sc.PHASE_LOOP_WAIT, self.record.start_ns, now))

    # --- waits and phases ----------------------------------------------------------
    def record_lock_wait(self, lock: str, start_ns: int, end_ns: int) -> None:
        self.lock_wait_ns += end_ns - start_ns
        self.lock_end_ns = end_ns
        self.record.phases.append(PhaseRecord(sc.PHASE_LOCK_WAIT, start_ns, end_ns, {sc.LOCK: lock}))

    def begin_phase(self, phase: str, activity: Any, reuse_resources: Any = None) -> PhaseMark | None:
        """Start timing ``phase`` if it belongs to this handoff, else return None.

        Session close drains and closes activities too, and tasks spawned during a
        handoff inherit its ContextVar: only the first drain/pause, the close of the
        same activity, and the first start/resume of the handoff's agent count.
        """
        if self.ended or phase in self.started_phases:
            return None
        now = time.time_ns()
        if phase == sc.CLOSE:
            if self._old_activity is None or self._old_activity() is not activity:
                return None
        elif phase in (sc.START, sc.RESUME):
            if activity.agent is not self._to_agent():
                return None
            self._step(sc.PHASE_SWITCH, self.left_ns, now)
        else:  # drain / pause: the activity actually left
            if self._old_activity is not None:
                return None
            self._old_activity = weakref.ref(activity)
            self.from_agent = (activity.agent.label, agent_id(activity.agent))
            self._step(sc.PHASE_PREPARE, max(self.entered_ns, self.lock_end_ns), now)
        self.started_phases.add(phase)
        if reuse_resources is None:
            return PhaseMark(phase, now, self.lock_wait_ns)
        # snapshot now: `_start_session` clears the fields as ownership moves
        reused = Reuse(
            stt=getattr(reuse_resources, "stt_pipeline", None) is not None,
            realtime_session=getattr(reuse_resources, "rt_session", None) is not None,
            turn_detector=getattr(reuse_resources, "turn_detector_stream", None) is not None,
        )
        return PhaseMark(phase, now, self.lock_wait_ns, reused)

    def _step(self, phase: str, start_ns: int, end_ns: int) -> None:
        """LiveKit's work between two of the phases above, from where the one before ended (its
        start unknown: 0, the step is not recorded)."""
        if start_ns and end_ns > start_ns:
            self.record.phases.append(PhaseRecord(phase, start_ns, end_ns))

    def end_phase(self, mark: PhaseMark, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        phase, start_ns, waited_before, reused = mark
        waited = self.lock_wait_ns - waited_before
        # the activity lock is about the first thing each phase takes: the work follows its wait
        # (what ran before the wait, a few µs, goes unattributed rather than overlap it)
        begin = max(start_ns + waited, self.lock_end_ns) if waited else start_ns
        failure = None if error is None else kept_error(error)
        self.record.phases.append(PhaseRecord(phase, min(end_ns, begin), end_ns, None, failure))
        if phase not in (sc.START, sc.RESUME):
            self.left_ns = end_ns
        elif error is None:
            self.started_ns = end_ns
            self.reused = reused
            self.end(sc.OUTCOME_COMPLETED)

    # --- around the new activity ---------------------------------------------------------
    def record_realtime_update(self, kind: str, start_ns: int, error: BaseException | None) -> None:
        failure = kept_error(error)
        if error is not None and (isinstance(error, TimeoutError) or "timed out" in str(error)):
            failure = sc.ERROR_TIMEOUT
        self.record.phases.append(
            PhaseRecord(
                sc.PHASE_REALTIME_UPDATE, start_ns, time.time_ns(), {sc.REALTIME_UPDATE_KIND: kind}, failure
            )
        )

    def record_reconnect(self, resource: str, acquire_seconds: float, end_ns: int) -> None:
        """A replacement connection the handoff caused, timed by the framework's acquire_time."""
        start_ns = end_ns - int(acquire_seconds * 1e9)
        self._link(PhaseRecord(sc.PHASE_RECONNECT, start_ns, end_ns, {sc.RECONNECT_RESOURCE: resource}))

    def record_first_speech(self, end_ns: int, track: Any = None) -> None:
        """The new agent started speaking: the silence the caller heard ends here. With the
        room's published ``track``, its WebRTC statistics say what the caller hears of it."""
        start_ns = self.record.start_ns
        phase = PhaseRecord(sc.PHASE_FIRST_SPEECH, start_ns, max(end_ns, start_ns))
        if track is None:
            self._link(phase)
            return
        self._downlink_task = asyncio.get_running_loop().create_task(
            self._link_with_downlink(phase, track), name="otel_handoff_first_speech"
        )

    async def _link_with_downlink(self, phase: PhaseRecord, track: Any) -> None:
        try:
            phase.attributes = downlink_attributes(await read_downlink(track))
        except Exception as exc:  # the span goes without them
            report("first speech statistics", exc)
        finally:
            self._downlink_task = None
            self._link(phase)

    def _link(self, phase: PhaseRecord) -> None:
        """A linked span of this handoff: now, or (during its on_enter) once its span is made."""
        if self._emitted is not None:
            emit_linked(self.telemetry, self._emitted, phase)
        elif self.ended:
            self._linked.append(phase)

    # --- LiveKit's own spans of it (1.8.2+) ---------------------------------------------------
    def parent_of_livekit_spans(self) -> otel_context.Context | None:
        """LiveKit starts its ``update_agent``: where LiveKit's spans go where ours go, our span
        starts now (with the handoff's start time) to be its parent, and that context is
        returned. None, and LiveKit's spans left where they are, where LiveKit's telemetry is
        off (its session span does not record) or on another provider (LiveKit Cloud's own,
        say): there its tree would lose a parent, and ours stays whole."""
        session = self._session()
        if not livekit_records(session):
            return None
        theirs = span_in(session._root_span_context)
        record = self.record
        parent = record.parent if record.parent is not None else otel_context.get_current()
        record.opened = opened = crossing.open_handoff(self.telemetry, record.start_ns, parent)
        ours = opened.span  # emit completes and ends it, whatever is decided here
        # one SDK provider, one resource object: its tracers hand it to every span they start
        same_provider = getattr(theirs, "resource", None) is getattr(ours, "resource", False)
        if not (same_provider and ours.is_recording()):
            return None
        self.livekit_open = True
        return opened.context

    def livekit_spans_started(self, span: Any) -> None:
        """LiveKit's ``update_agent`` is under ours: where it records, the backend gets its
        drain/pause, start/resume and on_enter spans, and ours of them are not sent again."""
        self.record.framework_spans = span.is_recording()

    def left_update_activity(self) -> None:
        """`_update_activity` returned or raised with LiveKit's ``update_agent`` under our span
        (``livekit_open``), ended in it: a handoff over by now is sent, ending no earlier."""
        self.livekit_open = False
        if self.ended and not self.on_enter_pending:
            self.record.end_ns = max(self.record.end_ns, time.time_ns())
            self._emit()

    # --- on_enter --------------------------------------------------------------------
    def watch_on_enter(self, coro: Any) -> Any:
        """The new agent's start scheduled its on_enter: the handoff ends when on_enter does."""
        self.on_enter_pending = True
        return self.run_on_enter(coro)

    async def run_on_enter(self, coro: Any) -> Any:
        """Await the new agent's on_enter coroutine inside its own task, timing it."""
        start_ns = time.time_ns()
        error: BaseException | None = None
        try:
            return await coro
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                self._record_on_enter(start_ns, error)
            except Exception as fault:
                report("on_enter", fault)

    def on_enter_never_ran(self) -> None:
        """The on_enter its start scheduled will never run (its task was cancelled before its
        first step, as a session close does, or never made): the handoff ends here, its on_enter
        cancelled."""
        if self.on_enter_pending:
            self._record_on_enter(time.time_ns(), CANCELLED)

    def _record_on_enter(self, start_ns: int, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        phase = PhaseRecord(sc.PHASE_ON_ENTER, start_ns, end_ns, None, kept_error(error))
        if self._emitted is not None:  # an on_enter the handoff did not wait for
            emit_late_phase(self.telemetry, self._emitted, phase)
            return
        if self.on_enter_pending:  # the task it runs in waited for the loop since the start ended
            self._step(sc.PHASE_LOOP_WAIT, self.started_ns, start_ns)
        self.record.phases.append(phase)
        if self.on_enter_pending:
            self.on_enter_pending = False
            if self.ended:  # the last phase: the handoff is over now
                if isinstance(error, asyncio.CancelledError) and self._session_ended():
                    self.record.attributes[sc.ENDED_BY] = sc.ENDED_BY_SESSION_CLOSE
                self.record.end_ns = max(self.record.end_ns, end_ns)
                if not self.livekit_open:  # else once `_update_activity` returns (it waited)
                    self._emit()

    def _session_ended(self) -> bool:
        """Its session is closing, closed or gone: what cut an on_enter short was its end."""
        session = self._session()
        if session is None:
            return True
        # `_closing_task` is set as the close is asked for (shutdown()), `_closing` once it runs
        return (
            bool(getattr(session, "_closing", False)) or getattr(session, "_closing_task", None) is not None
        )

    # --- the end -----------------------------------------------------------------------
    def finish(self) -> None:
        """`_update_activity` returned: completed if the new agent runs, else skipped (closing)."""
        if self.ended:
            return
        session = self._session()
        activity = getattr(session, "_activity", None)
        running = activity is not None and activity.agent is self._to_agent()
        self.end(sc.OUTCOME_COMPLETED if running else sc.OUTCOME_SKIPPED)

    def reject(self, reason: str, from_agent: Any) -> None:
        """The framework refused this handoff (e.g. an Agent returned after `ctx.update()`)."""
        if from_agent is not None:
            self.from_agent = (from_agent.label, agent_id(from_agent))
        self.record.attributes[sc.REJECTION_REASON] = reason
        self._error = sc.OUTCOME_REJECTED
        self.end(sc.OUTCOME_REJECTED)

    def fail(self, error: BaseException) -> None:
        if self.ended:
            return
        session = self._session()
        if isinstance(error, asyncio.CancelledError):
            closing = bool(session is not None and getattr(session, "_closing", False))
            if not closing:
                self._error = sc.ERROR_CANCELLED
            self.end(sc.OUTCOME_SKIPPED if closing else sc.OUTCOME_ERROR)
            return
        self._error = kept_error(error)
        self.end(sc.OUTCOME_ERROR)

    def end(self, outcome: str) -> None:
        """Complete the record and emit it; idempotent, and every span it starts ends."""
        if self.ended:
            return
        self.ended = True
        record = self.record
        record.end_ns = time.time_ns()
        record.outcome = outcome
        record.error = self._error
        try:
            self._summarize()
        except Exception as exc:  # the span is still made, with what is known
            report("handoff summary", exc)
        session = self._session()
        if outcome == sc.OUTCOME_COMPLETED and session is not None:
            self.telemetry.awaiting_speech[session] = self  # until the new agent first speaks
        if not (self.on_enter_pending or self.livekit_open):  # else when on_enter ends, or LiveKit's span
            self._emit()

    def _emit(self) -> None:
        self._emitted = emitted = emit(self.telemetry, self.record)
        if self._linked:  # first speech (or a reconnect) during on_enter
            for phase in self._linked:
                emit_linked(self.telemetry, emitted, phase)
            self._linked.clear()

    def _summarize(self) -> None:
        """LiveKit's own attributes; every duration the span model promises, 0 when it did not run."""
        record = self.record
        from_label, from_id = self.from_agent or self._current_agent()
        record.from_agent, record.from_agent_id = from_label, from_id
        stt, realtime_session, turn_detector = self.reused
        attributes = record.attributes
        attributes.update(_modes(self.previous_activity, self.new_activity))
        attributes[sc.STT_REUSED] = stt
        attributes[sc.REALTIME_SESSION_REUSED] = realtime_session
        attributes[sc.TURN_DETECTOR_REUSED] = turn_detector
        # the reasons arrays, consistent with what actually moved to the new activity
        if not self.telemetry.features.reuse:
            attributes[sc.STT_REUSE_BLOCKED_BY] = [sc.BLOCKED_RELEASE]
            attributes[sc.REALTIME_REUSE_BLOCKED_BY] = [sc.BLOCKED_RELEASE]
            return
        if self.stt_blocked is not None:  # None: the handoff never got as far as deciding
            attributes[sc.STT_REUSE_BLOCKED_BY] = [] if stt else self.stt_blocked
        if self.realtime_blocked is not None:
            attributes[sc.REALTIME_REUSE_BLOCKED_BY] = [] if realtime_session else self.realtime_blocked

    def _current_agent(self) -> tuple[str, str]:
        """The agent in place when nothing was drained or paused (e.g. skipped early)."""
        session = self._session()
        agent = getattr(getattr(session, "_activity", None), "agent", None)
        return (agent.label, agent_id(agent)) if agent is not None else ("", "")
