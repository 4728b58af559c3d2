"""One LiveKit handoff in flight: its timings while it runs, its spans once it is over.

A handoff is traced without ever making our spans current: LiveKit replaces the current
OTel context inside ``_update_activity`` and user code must see the same current span as
without instrumentation. The handoff travels in a ``ContextVar`` instead. While it runs, the
wrappers only take timestamps; when it ends, its span and every child are made back to back
with their real start and end times (a span made in the middle of the framework's work costs
about 1.6 times as much), so a cancelled or failed phase never leaves one open. The new
agent's ``on_enter`` span follows when on_enter ends, if that is later.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

from ..core import schema as sc
from ..core.faults import report

# the handoff whose `_update_activity` runs in this task
CURRENT_HANDOFF: ContextVar[LiveKitHandoff | None] = ContextVar("otel_handoff_livekit_current", default=None)
# a handoff requested by `update_agent()`, waiting for its task to reach `_update_activity`
PENDING_HANDOFF: ContextVar[LiveKitHandoff | None] = ContextVar("otel_handoff_livekit_pending", default=None)


def record_error(span: trace.Span, error: BaseException) -> None:
    """Status ERROR and an `exception` event with the type only.

    Private by default: an exception's message and stack can quote the conversation (an LLM
    provider's error echoing the prompt), so neither is recorded.
    """
    name, module = type(error).__qualname__, type(error).__module__
    qualified = name if module in (None, "builtins") else f"{module}.{name}"  # as the SDK spells it
    span.add_event("exception", {"exception.type": qualified})
    span.set_status(Status(StatusCode.ERROR, name))


def _no_agent() -> None:
    """Stands in for a weak reference when the new agent is unknown (a refused handoff)."""
    return None


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


# a child span to make: (name, start ns, end ns, attributes, error)
Child = tuple[str, int, int, "dict[str, Any] | None", "BaseException | None"]


class LiveKitHandoff:
    """State of one handoff, from its request to the new activity's start or resume."""

    __slots__ = (
        "_children",
        "_error",
        "_links",
        "_old_activity",
        "_on_enter_seconds",
        "_parent_context",
        "_phase_ns",
        "_recording",
        "_request_context",
        "_session",
        "_status",
        "_to_agent",
        "attributes",
        "ended",
        "from_agent",
        "lock_wait_ns",
        "new_activity",
        "previous_activity",
        "queue_wait_ns",
        "queued",
        "realtime_blocked",
        "realtime_session",
        "reused",
        "span_context",
        "start_ns",
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
        previous_activity: str = sc.CLOSE,
        new_activity: str = sc.START,
    ) -> None:
        self.telemetry = telemetry
        self._session = weakref.ref(session)
        self._to_agent = weakref.ref(agent) if agent is not None else _no_agent
        self._old_activity: weakref.ref[Any] | None = None
        self.start_ns = tool.deferred_since_ns if tool and tool.deferred_since_ns else time.time_ns()
        self.queued = queued
        self.queue_wait_ns = 0
        self.lock_wait_ns = 0
        self._phase_ns: dict[str, int] = {}
        self.started_phases: set[str] = set()
        self.previous_activity = previous_activity
        self.new_activity = new_activity
        self.ended = False
        self.from_agent: tuple[str, str] | None = None  # (label, id)
        self.reused = NOT_REUSED
        self.stt_blocked: list[str] | None = None
        self.realtime_blocked: list[str] | None = None
        self.realtime_session: weakref.ref[Any] | None = None  # reused: its updates are timed
        self._request_context = parent
        self._children: list[Child] = []  # made with the handoff's span, once it ends
        self._error: BaseException | None = None
        self._status: str | None = None  # an ERROR status without an exception
        self._on_enter_seconds: float | None = None  # on_enter done before the handoff ended
        self._parent_context: otel_context.Context | None = None  # the span, once made
        self._recording = False  # the span, once made, is recorded: its late children are too
        self.span_context: SpanContext | None = None

        attributes = dict(telemetry.static_attributes)
        attributes[sc.TRIGGER] = trigger
        attributes[sc.SEQUENCE] = sequence
        attributes[sc.GEN_AI_HANDOFF_TO_AGENT] = agent.label if agent is not None else ""
        attributes[sc.TO_AGENT_ID] = agent_id(agent) if agent is not None else ""
        if tool is not None:
            attributes[sc.GEN_AI_TOOL_NAME] = tool.name
            attributes[sc.GEN_AI_TOOL_CALL_ID] = tool.call_id
        self._links = (
            [Link(tool.span_context)]
            if tool is not None and tool.span_context is not None and tool.span_context.is_valid
            else None
        )
        self.attributes = attributes  # the span's, completed at the end; the metrics pick from it

    # --- the session ---------------------------------------------------------------
    def is_for(self, session: Any) -> bool:
        return self._session() is session

    def enters(self, agent: Any) -> bool:
        """Is ``agent`` the one this handoff hands the conversation to?"""
        return agent is self._to_agent()

    def leaves(self, activity: Any) -> bool:
        """Is ``activity`` the one this handoff drained or paused?"""
        return self._old_activity is not None and self._old_activity() is activity

    def bind(self, previous_activity: str, new_activity: str) -> None:
        """`_update_activity` was entered: the queue wait, if any, is over."""
        self.previous_activity = previous_activity
        self.new_activity = new_activity
        if self.queued:
            now = time.time_ns()
            self.queue_wait_ns = now - self.start_ns
            self._children.append((sc.SPAN_QUEUE_WAIT, self.start_ns, now, None, None))

    # --- waits and phases ----------------------------------------------------------
    def record_lock_wait(self, lock: str, start_ns: int, end_ns: int) -> None:
        self.lock_wait_ns += end_ns - start_ns
        self._children.append((sc.SPAN_LOCK_WAIT, start_ns, end_ns, {sc.LOCK: lock}, None))

    def begin_phase(self, phase: str, activity: Any, reuse_resources: Any = None) -> PhaseMark | None:
        """Start timing ``phase`` if it belongs to this handoff, else return None.

        Session close drains and closes activities too, and tasks spawned during a
        handoff inherit its ContextVar: only the first drain/pause, the close of the
        same activity, and the first start/resume of the handoff's agent count.
        """
        if self.ended or phase in self.started_phases:
            return None
        if phase == sc.CLOSE:
            if self._old_activity is None or self._old_activity() is not activity:
                return None
        elif phase in (sc.START, sc.RESUME):
            if activity.agent is not self._to_agent():
                return None
        else:  # drain / pause: the activity actually left
            if self._old_activity is not None:
                return None
            self._old_activity = weakref.ref(activity)
            self.from_agent = (activity.agent.label, agent_id(activity.agent))
        self.started_phases.add(phase)
        if reuse_resources is None:
            return PhaseMark(phase, time.time_ns(), self.lock_wait_ns)
        # snapshot now: `_start_session` clears the fields as ownership moves
        reused = Reuse(
            stt=getattr(reuse_resources, "stt_pipeline", None) is not None,
            realtime_session=getattr(reuse_resources, "rt_session", None) is not None,
            turn_detector=getattr(reuse_resources, "turn_detector_stream", None) is not None,
        )
        return PhaseMark(phase, time.time_ns(), self.lock_wait_ns, reused)

    def end_phase(self, mark: PhaseMark, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        phase, start_ns, waited_before, reused = mark
        waited = self.lock_wait_ns - waited_before
        self._phase_ns[phase] = max(0, end_ns - start_ns - waited)
        # the activity lock is the first thing each phase takes: its wait precedes the work
        self._children.append((sc.PHASES[phase][0], min(end_ns, start_ns + waited), end_ns, None, error))
        if error is None and phase in (sc.START, sc.RESUME):
            self.reused = reused
            self.end(sc.OUTCOME_COMPLETED)

    # --- around the new activity ---------------------------------------------------------
    def record_realtime_update(self, kind: str, start_ns: int, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        attributes: dict[str, Any] = {
            sc.REALTIME_UPDATE_KIND: kind,
            sc.REALTIME_UPDATE_DURATION: (end_ns - start_ns) / 1e9,
        }
        if error is not None:
            timed_out = isinstance(error, TimeoutError) or "timed out" in str(error)
            attributes[sc.ERROR_TYPE] = "timeout" if timed_out else type(error).__qualname__
        self._children.append((sc.SPAN_REALTIME_UPDATE, start_ns, end_ns, attributes, error))

    def record_reconnect(self, resource: str, acquire_seconds: float, end_ns: int) -> None:
        """A replacement connection the handoff caused, timed by the framework's acquire_time."""
        start_ns = end_ns - int(acquire_seconds * 1e9)
        span = self.telemetry.tracer.start_span(
            sc.SPAN_RECONNECT,
            context=self._request_context,
            links=self._link_to_handoff(),
            attributes={sc.RECONNECT_RESOURCE: resource, sc.RECONNECT_DURATION: acquire_seconds},
            start_time=start_ns,
        )
        span.end(end_time=end_ns)

    def record_first_speech(self, end_ns: int) -> None:
        """The new agent started speaking: the silence the caller heard ends here."""
        delay = max(0, end_ns - self.start_ns) / 1e9
        span = self.telemetry.tracer.start_span(
            sc.SPAN_FIRST_SPEECH,
            context=self._request_context,
            links=self._link_to_handoff(),
            attributes={sc.FIRST_SPEECH_DELAY: delay},
            start_time=self.start_ns,
        )
        span.end(end_time=max(end_ns, self.start_ns))
        self.telemetry.metrics.record_phase(
            sc.PHASE_FIRST_SPEECH, delay, self.attributes, self._parent_context
        )

    def _link_to_handoff(self) -> list[Link] | None:
        return [Link(self.span_context)] if self.span_context is not None else None

    # --- on_enter --------------------------------------------------------------------
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

    def _record_on_enter(self, start_ns: int, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        seconds = (end_ns - start_ns) / 1e9
        child: Child = (sc.SPAN_ON_ENTER, start_ns, end_ns, {sc.ON_ENTER_DURATION: seconds}, error)
        cut_short = isinstance(error, asyncio.CancelledError)  # not an on_enter duration
        if self._parent_context is None:  # the handoff is still running: made with its span
            self._children.append(child)
            if not cut_short:
                self._on_enter_seconds = seconds
            return
        if self._recording:
            self._emit_child(*child)
        if not cut_short:
            self.telemetry.metrics.record_phase(
                sc.PHASE_ON_ENTER, seconds, self.attributes, self._parent_context
            )

    # --- the end -----------------------------------------------------------------------
    def finish(self) -> None:
        """`_update_activity` returned: completed if the new agent runs, else skipped (closing)."""
        session = self._session()
        activity = getattr(session, "_activity", None)
        running = activity is not None and activity.agent is self._to_agent()
        self.end(sc.OUTCOME_COMPLETED if running else sc.OUTCOME_SKIPPED)

    def reject(self, reason: str, from_agent: Any) -> None:
        """The framework refused this handoff (e.g. an Agent returned after `ctx.update()`)."""
        if from_agent is not None:
            self.from_agent = (from_agent.label, agent_id(from_agent))
        self.attributes[sc.REJECTION_REASON] = reason
        self._status = reason
        self.end(sc.OUTCOME_REJECTED)

    def fail(self, error: BaseException) -> None:
        if self.ended:
            return
        session = self._session()
        if isinstance(error, asyncio.CancelledError):
            closing = bool(session is not None and getattr(session, "_closing", False))
            self._status = "handoff cancelled"
            self.end(sc.OUTCOME_SKIPPED if closing else sc.OUTCOME_ERROR)
            return
        self._error = error
        self.end(sc.OUTCOME_ERROR)

    def end(self, outcome: str) -> None:
        """Complete the attributes and make the spans; idempotent, and every span it starts ends."""
        if self.ended:
            return
        self.ended = True
        end_ns = time.time_ns()
        try:
            self._summarize(outcome)
        except Exception as exc:  # the span is still made, with what is known
            report("handoff summary", exc)
        self._emit(end_ns)
        self._record_metrics()
        session = self._session()
        if outcome == sc.OUTCOME_COMPLETED and session is not None:
            self.telemetry.awaiting_speech[session] = self  # until the new agent first speaks

    def _emit(self, end_ns: int) -> None:
        """The handoff's span and its children, back to back, with the times taken on the way."""
        span = self.telemetry.tracer.start_span(
            sc.SPAN_HANDOFF,
            context=self._request_context,
            kind=SpanKind.INTERNAL,
            attributes=self.attributes,
            links=self._links,
            start_time=self.start_ns,
        )
        try:
            self.span_context = span.get_span_context()
            self._parent_context = trace.set_span_in_context(span)
            self._recording = span.is_recording()
            if not self._recording:  # sampled out (or a NoOp provider): so are its children
                self._children = []
                return
            if self._error is not None:
                record_error(span, self._error)
            elif self._status is not None:
                span.set_status(Status(StatusCode.ERROR, self._status))
            for child in self._children:
                self._emit_child(*child)
            self._children = []
        finally:
            span.end(end_time=end_ns)

    def _summarize(self, outcome: str) -> None:
        phases = self._phase_ns
        attributes = self.attributes
        attributes[sc.OUTCOME] = outcome
        attributes[sc.PREVIOUS_ACTIVITY] = self.previous_activity
        attributes[sc.NEW_ACTIVITY] = self.new_activity
        attributes[sc.QUEUE_WAIT_DURATION] = self.queue_wait_ns / 1e9
        attributes[sc.LOCK_WAIT_DURATION] = self.lock_wait_ns / 1e9
        attributes[sc.DURATION] = sum(phases.values()) / 1e9
        stt, realtime_session, turn_detector = self.reused
        attributes[sc.STT_REUSED] = stt
        attributes[sc.REALTIME_SESSION_REUSED] = realtime_session
        attributes[sc.TURN_DETECTOR_REUSED] = turn_detector
        from_label, from_id = self.from_agent or self._current_agent()
        attributes[sc.GEN_AI_HANDOFF_FROM_AGENT] = from_label
        attributes[sc.FROM_AGENT_ID] = from_id
        leaving = sc.DRAIN if self.previous_activity == sc.CLOSE else sc.PAUSE
        entering = sc.START if self.new_activity == sc.START else sc.RESUME
        attributes[sc.PHASES[leaving][1]] = phases.get(leaving, 0) / 1e9
        if self.previous_activity == sc.CLOSE:
            attributes[sc.CLOSE_DURATION] = phases.get(sc.CLOSE, 0) / 1e9
        attributes[sc.PHASES[entering][1]] = phases.get(entering, 0) / 1e9
        attributes.update(self._reuse_blockers())

    def _record_metrics(self) -> None:
        metrics, attributes, handoff = self.telemetry.metrics, self.attributes, self._parent_context
        if not metrics.enabled:
            return
        metrics.record_handoff(attributes.get(sc.DURATION, 0.0), attributes, handoff)
        phases = [(phase, nanoseconds / 1e9) for phase, nanoseconds in self._phase_ns.items()]
        if self.queued:
            phases.append((sc.PHASE_QUEUE_WAIT, self.queue_wait_ns / 1e9))
        if self.lock_wait_ns:
            phases.append((sc.PHASE_LOCK_WAIT, self.lock_wait_ns / 1e9))
        if self._on_enter_seconds is not None:
            phases.append((sc.PHASE_ON_ENTER, self._on_enter_seconds))
        metrics.record_phases(phases, attributes, handoff)

    def _reuse_blockers(self) -> dict[str, list[str]]:
        """The reasons arrays, consistent with what actually moved to the new activity."""
        if not self.telemetry.features.reuse:
            return {
                sc.STT_REUSE_BLOCKED_BY: [sc.BLOCKED_RELEASE],
                sc.REALTIME_REUSE_BLOCKED_BY: [sc.BLOCKED_RELEASE],
            }
        found: dict[str, list[str]] = {}
        stt_reused, realtime_reused = self.reused.stt, self.reused.realtime_session
        for key, reasons, reused in (
            (sc.STT_REUSE_BLOCKED_BY, self.stt_blocked, stt_reused),
            (sc.REALTIME_REUSE_BLOCKED_BY, self.realtime_blocked, realtime_reused),
        ):
            if reasons is not None:  # None: the handoff never got as far as deciding
                found[key] = [] if reused else reasons
        return found

    def _current_agent(self) -> tuple[str, str]:
        """The agent in place when nothing was drained or paused (e.g. skipped early)."""
        session = self._session()
        agent = getattr(getattr(session, "_activity", None), "agent", None)
        return (agent.label, agent_id(agent)) if agent is not None else ("", "")

    def _emit_child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any] | None = None,
        error: BaseException | None = None,
    ) -> None:
        span = self.telemetry.tracer.start_span(
            name, context=self._parent_context, attributes=attributes, start_time=start_ns
        )
        if error is not None and not isinstance(error, asyncio.CancelledError):
            record_error(span, error)
        span.end(end_time=end_ns)
