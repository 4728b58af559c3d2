"""One LiveKit handoff in flight: its span, its phase timings, and how they become spans.

A handoff is traced without ever making our spans current: LiveKit replaces the current
OTel context inside ``_update_activity`` and user code must see the same current span as
without instrumentation. The handoff travels in a ``ContextVar`` instead, and every child
span is parented explicitly. Child spans are emitted when their phase is over, with
explicit start and end times, so a cancelled or failed phase never leaves one open.
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
from ..core.faults import guard

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


@dataclass
class PhaseMark:
    phase: str
    start_ns: int
    lock_wait_before_ns: int
    reused: Reuse = NOT_REUSED


class LiveKitHandoff:
    """State of one handoff, from its request to the new activity's start or resume."""

    __slots__ = (
        "_old_activity",
        "_parent_context",
        "_phase_ns",
        "_request_context",
        "_session",
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
        "span",
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

        attributes = dict(telemetry.static_attributes)
        attributes[sc.TRIGGER] = trigger
        attributes[sc.SEQUENCE] = sequence
        attributes[sc.GEN_AI_HANDOFF_TO_AGENT] = agent.label if agent is not None else ""
        attributes[sc.TO_AGENT_ID] = agent_id(agent) if agent is not None else ""
        if tool is not None:
            attributes[sc.GEN_AI_TOOL_NAME] = tool.name
            attributes[sc.GEN_AI_TOOL_CALL_ID] = tool.call_id
        links = (
            [Link(tool.span_context)]
            if tool is not None and tool.span_context is not None and tool.span_context.is_valid
            else None
        )
        self.attributes = attributes  # kept for the metrics recorded at the end
        self.span = telemetry.tracer.start_span(
            sc.SPAN_HANDOFF,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=self.start_ns,
        )
        self._parent_context = trace.set_span_in_context(self.span)

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
            self._emit_child(sc.SPAN_QUEUE_WAIT, self.start_ns, now)

    # --- waits and phases ----------------------------------------------------------
    def record_lock_wait(self, lock: str, start_ns: int, end_ns: int) -> None:
        self.lock_wait_ns += end_ns - start_ns
        self._emit_child(sc.SPAN_LOCK_WAIT, start_ns, end_ns, {sc.LOCK: lock})

    def begin_phase(self, phase: str, activity: Any, reuse_resources: Any = None) -> PhaseMark | None:
        """Start timing ``phase`` if it belongs to this handoff, else return None.

        Session close drains and closes activities too, and tasks spawned during a
        handoff inherit its ContextVar: only the first drain/pause, the close of the
        same activity, and the first start/resume of the handoff's agent count.
        """
        if self.ended or phase in self.started_phases:
            return None
        if phase in (sc.CLOSE,):
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
        mark = PhaseMark(phase, time.time_ns(), self.lock_wait_ns)
        if reuse_resources is not None:
            # snapshot now: `_start_session` clears the fields as ownership moves
            mark.reused = Reuse(
                stt=getattr(reuse_resources, "stt_pipeline", None) is not None,
                realtime_session=getattr(reuse_resources, "rt_session", None) is not None,
                turn_detector=getattr(reuse_resources, "turn_detector_stream", None) is not None,
            )
        return mark

    def end_phase(self, mark: PhaseMark, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        waited = self.lock_wait_ns - mark.lock_wait_before_ns
        self._phase_ns[mark.phase] = max(0, end_ns - mark.start_ns - waited)
        span_name = sc.PHASES[mark.phase][0]
        # the activity lock is the first thing each phase takes: its wait precedes the work
        self._emit_child(span_name, min(end_ns, mark.start_ns + waited), end_ns, error=error)
        if error is None and mark.phase in (sc.START, sc.RESUME):
            self.reused = mark.reused
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
        self._emit_child(sc.SPAN_REALTIME_UPDATE, start_ns, end_ns, attributes, error=error)

    def record_reconnect(self, resource: str, acquire_seconds: float, end_ns: int) -> None:
        """A replacement connection the handoff caused, timed by the framework's acquire_time."""
        start_ns = end_ns - int(acquire_seconds * 1e9)
        span = self.telemetry.tracer.start_span(
            sc.SPAN_RECONNECT,
            context=self._request_context,
            links=[Link(self.span.get_span_context())],
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
            links=[Link(self.span.get_span_context())],
            attributes={sc.FIRST_SPEECH_DELAY: delay},
            start_time=self.start_ns,
        )
        span.end(end_time=max(end_ns, self.start_ns))
        self.telemetry.metrics.record_phase(
            sc.PHASE_FIRST_SPEECH, delay, self.attributes, self._parent_context
        )

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
            guard("on_enter", self._record_on_enter, start_ns, error)

    def _record_on_enter(self, start_ns: int, error: BaseException | None) -> None:
        end_ns = time.time_ns()
        seconds = (end_ns - start_ns) / 1e9
        self._emit_child(sc.SPAN_ON_ENTER, start_ns, end_ns, {sc.ON_ENTER_DURATION: seconds}, error=error)
        if not isinstance(error, asyncio.CancelledError):  # cut short: not an on_enter duration
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
        self.span.set_attribute(sc.REJECTION_REASON, reason)
        self.span.set_status(Status(StatusCode.ERROR, reason))
        self.end(sc.OUTCOME_REJECTED)

    def fail(self, error: BaseException) -> None:
        if self.ended:
            return
        session = self._session()
        if isinstance(error, asyncio.CancelledError):
            closing = bool(session is not None and getattr(session, "_closing", False))
            self.span.set_status(Status(StatusCode.ERROR, "handoff cancelled"))
            self.end(sc.OUTCOME_SKIPPED if closing else sc.OUTCOME_ERROR)
            return
        record_error(self.span, error)
        self.end(sc.OUTCOME_ERROR)

    def end(self, outcome: str) -> None:
        """Set the summary attributes and end the span; idempotent, and the span always ends."""
        if self.ended:
            return
        self.ended = True
        try:
            self._summarize(outcome)
        finally:
            self.span.end()
        self._record_metrics()
        session = self._session()
        if outcome == sc.OUTCOME_COMPLETED and session is not None:
            self.telemetry.awaiting_speech[session] = self  # until the new agent first speaks

    def _summarize(self, outcome: str) -> None:
        phases = self._phase_ns
        attributes: dict[str, Any] = {
            sc.OUTCOME: outcome,
            sc.PREVIOUS_ACTIVITY: self.previous_activity,
            sc.NEW_ACTIVITY: self.new_activity,
            sc.QUEUE_WAIT_DURATION: self.queue_wait_ns / 1e9,
            sc.LOCK_WAIT_DURATION: self.lock_wait_ns / 1e9,
            sc.DURATION: sum(phases.values()) / 1e9,
        }
        attributes[sc.STT_REUSED] = self.reused.stt
        attributes[sc.REALTIME_SESSION_REUSED] = self.reused.realtime_session
        attributes[sc.TURN_DETECTOR_REUSED] = self.reused.turn_detector
        from_label, from_id = self.from_agent or self._current_agent()
        attributes[sc.GEN_AI_HANDOFF_FROM_AGENT] = from_label
        attributes[sc.FROM_AGENT_ID] = from_id
        attributes.update(self._reuse_blockers())
        leaving = sc.DRAIN if self.previous_activity == sc.CLOSE else sc.PAUSE
        entering = sc.START if self.new_activity == sc.START else sc.RESUME
        attributes[sc.PHASES[leaving][1]] = phases.get(leaving, 0) / 1e9
        if self.previous_activity == sc.CLOSE:
            attributes[sc.CLOSE_DURATION] = phases.get(sc.CLOSE, 0) / 1e9
        attributes[sc.PHASES[entering][1]] = phases.get(entering, 0) / 1e9
        self.span.set_attributes(attributes)
        self.attributes.update(attributes)

    def _record_metrics(self) -> None:
        metrics, attributes, handoff = self.telemetry.metrics, self.attributes, self._parent_context
        metrics.record_handoff(attributes[sc.DURATION], attributes, handoff)
        phases = [(phase, nanoseconds / 1e9) for phase, nanoseconds in self._phase_ns.items()]
        if self.queued:
            phases.append((sc.PHASE_QUEUE_WAIT, self.queue_wait_ns / 1e9))
        if self.lock_wait_ns:
            phases.append((sc.PHASE_LOCK_WAIT, self.lock_wait_ns / 1e9))
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
