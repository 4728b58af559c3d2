"""The wrapt wrappers the LiveKit instrumentor installs, one small function per wrap point.

Each wrapper does its own bookkeeping through ``guard`` (a fault of ours is logged once
and the framework call goes on untouched) and otherwise calls the original with the
same arguments, returning its value and letting its exceptions and cancellation through.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanContext

from ..core import delivery
from ..core import schema as sc
from ..core.emit import span_in
from ..core.faults import guard, report
from ..core.instrumentor import wrap_where_defined
from ..core.shadow import Shadows, original
from ..core.spans import HandoffTelemetry
from ._downlink import published_audio_track
from ._features import UPDATE_AGENT_SPAN, LiveKitFeatures
from ._handoff import CURRENT_HANDOFF, PENDING_HANDOFF, LiveKitHandoff, ToolCause, livekit_records
from ._reuse import realtime_blockers, stt_blockers

ON_ENTER_TASK_NAME = "AgentTask_on_enter"
LIVEKIT_SCOPE = "livekit-agents"  # the instrumentation scope of LiveKit's own spans
_NEW_ACTIVITY_PHASES = frozenset((sc.START, sc.RESUME))
FINAL_UPDATE_SUFFIX = "_final"  # `RunContext._make_update_output` of a tool's return after ctx.update()
REJECTED_AFTER_UPDATE = "agent handoff after a progress update is not supported"
CANCELLED_BY_APP = "cancel_agent_handoff"  # the rejection reason of a handoff the app cancelled


@dataclass(kw_only=True)
class LiveKitTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    features: LiveKitFeatures
    # session -> handoffs requested in it (agent_handoff.sequence)
    sequences: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    # agent returned by a tool -> that tool; read when `update_agent(agent)` follows
    tool_causes: weakref.WeakKeyDictionary[Any, ToolCause] = field(default_factory=weakref.WeakKeyDictionary)
    # session -> the last completed handoff whose new agent has not spoken yet
    awaiting_speech: weakref.WeakKeyDictionary[Any, LiveKitHandoff] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # realtime session / STT -> (handoff, resource) whose replacement connection is awaited
    reconnect_watch: weakref.WeakKeyDictionary[Any, tuple[LiveKitHandoff, str]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # realtime session / STT -> (time, acquire_time) of a connection reported before being watched
    early_connections: weakref.WeakKeyDictionary[Any, tuple[int, float]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # run context -> time of its first progress update (for deferred tool handoffs)
    progress_updates: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    # (class, method) patched on first sight of a realtime session class; undone by uninstrument()
    lazily_wrapped: list[tuple[type, str]] = field(default_factory=list)
    # session -> its conversation id (the room sid of its job): read once per session
    conversation_ids: weakref.WeakKeyDictionary[Any, str | None] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # LiveKit's tracer seen while a handoff waits for its update_agent span (1.8.2+), else None
    update_agent_hook: UpdateAgentSpanHook | None = None

    def next_sequence(self, session: Any) -> int:
        value = self.sequences.get(session, 0) + 1
        self.sequences[session] = value
        return value

    def conversation_id(self, session: Any) -> str | None:
        try:
            return self.conversation_ids[session]
        except KeyError:
            value = self.conversation_ids[session] = self.features.conversation_id()
            return value


_LOCK_ACQUIRE = asyncio.Lock.acquire


class TimedLock(asyncio.Lock):
    """An ``asyncio.Lock`` that reports how long a handoff waited for it.

    Swapped in for the session's and activities' locks at construction. A free lock (nearly
    every acquire) is handed straight to ``asyncio.Lock.acquire``; only a contended one, in a
    handoff's task, is timed. With no handoff (or after ``uninstrument()``) it is a plain lock.
    """

    _otel_handoff_kind = ""  # which lock: a subclass's (no __init__ of ours on each activity's)

    def acquire(self) -> Coroutine[Any, Any, bool]:
        if not (self._locked or self._waiters):  # asyncio.Lock's own state, as its locked() reads it
            return _LOCK_ACQUIRE(self)
        handoff = CURRENT_HANDOFF.get()
        if handoff is None or handoff.ended:
            return _LOCK_ACQUIRE(self)
        return self._timed_acquire(handoff)

    async def _timed_acquire(self, handoff: LiveKitHandoff) -> bool:
        start_ns = time.time_ns()
        try:
            return await super().acquire()
        finally:
            guard("lock wait", handoff.record_lock_wait, self._otel_handoff_kind, start_ns, time.time_ns())


class SessionLock(TimedLock):
    _otel_handoff_kind = sc.LOCK_SESSION


class ActivityLock(TimedLock):
    _otel_handoff_kind = sc.LOCK_ACTIVITY


# --- construction: swap in timed locks ------------------------------------------------------
def wrap_session_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
    wrapped(*args, **kwargs)
    guard("AgentSession.__init__", _swap_lock, instance, "_activity_lock", SessionLock)


async def wrap_session_close(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """The session closed, LiveKit's ``agent_session`` span with it: a session that had a handoff
    sends what is left of ours (and LiveKit's spans beside it) on its way now. A job process ends
    with ``os._exit``, before a batch processor's next tick (``core.delivery``)."""
    try:
        return await wrapped(*args, **kwargs)
    finally:
        guard("AgentSession close", _forget_session, telemetry, instance)
        if instance in telemetry.sequences:
            guard("AgentSession close", delivery.conversation_ended, telemetry.tracer)


def _forget_session(telemetry: LiveKitTelemetry, session: Any) -> None:
    """Nothing of a closed session's handoffs waits on: no first speech, no reconnect will come."""
    handoff = telemetry.awaiting_speech.pop(session, None)
    if handoff is not None:
        handoff.on_enter_never_ran()
    watched = telemetry.reconnect_watch
    if watched:
        for key, (handoff, _) in list(watched.items()):
            if handoff.is_for(session):
                watched.pop(key, None)


def wrap_activity_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
    wrapped(*args, **kwargs)
    try:  # every handoff makes an activity
        _swap_lock(instance, "_lock", ActivityLock)
    except Exception as exc:
        report("AgentActivity.__init__", exc)


def _swap_lock(instance: Any, attr: str, timed: type[TimedLock]) -> None:
    lock = getattr(instance, attr, None)
    if type(lock) is asyncio.Lock and not lock.locked():
        setattr(instance, attr, timed())


# --- the request ------------------------------------------------------------------------------
def wrap_make_tool_output(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """Remember which tool returned an agent, for the `update_agent()` that follows."""
    output = wrapped(*args, **kwargs)
    guard("make_tool_output", _note_tool_cause, telemetry, output)
    return output


def _note_tool_cause(telemetry: LiveKitTelemetry, output: Any) -> None:
    agent = getattr(output, "agent_task", None)
    if agent is None:
        return
    call = output.fnc_call
    span_context = trace.get_current_span().get_span_context()
    telemetry.tool_causes[agent] = ToolCause(
        call.name, call.call_id, span_context if span_context.is_valid else None
    )


def wrap_update_agent(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """`update_agent()` is where a tool's or the app's handoff is requested: start timing here."""
    try:
        handoff = _request_handoff(telemetry, instance, args, kwargs)
    except Exception as exc:
        report("update_agent", exc)
        handoff = None
    if handoff is None:
        return wrapped(*args, **kwargs)
    token = PENDING_HANDOFF.set(handoff)  # the handoff task copies it: `wrap_update_activity_task`
    try:
        return wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("update_agent", handoff.fail, exc)
        raise
    finally:
        PENDING_HANDOFF.reset(token)


def _request_handoff(
    telemetry: LiveKitTelemetry, session: Any, args: Any, kwargs: Any
) -> LiveKitHandoff | None:
    if not session._started:
        return None  # before start() this only chooses the first agent
    agent = args[0] if args else kwargs["agent"]
    previous_task = getattr(session, "_update_activity_atask", None)
    queued = telemetry.features.queue_wait and previous_task is not None and not previous_task.done()
    # a tool's agent noted by make_tool_output; the weak dictionary's own dict tested in C first
    tool = telemetry.tool_causes.pop(agent, None) if telemetry.tool_causes.data else None
    if tool is None:
        trigger = sc.TRIGGER_API
    elif tool.deferred_since_ns is not None:
        trigger, queued = sc.TRIGGER_DEFERRED_TOOL, True  # the tool ran on after its update
    else:
        trigger = sc.TRIGGER_TOOL
    return _new_handoff(telemetry, session, agent, trigger, queued=queued, tool=tool)


def _new_handoff(
    telemetry: LiveKitTelemetry,
    session: Any,
    agent: Any,
    trigger: str,
    *,
    queued: bool = False,
    tool: ToolCause | None = None,
    parent: otel_context.Context | None = None,
) -> LiveKitHandoff:
    """The one place a handoff is made: the next sequence number, parented where it was requested."""
    asked_in = None
    if parent is None:
        parent, asked_in = _request_context(session)
    return LiveKitHandoff(
        telemetry,
        session,
        agent,
        trigger=trigger,
        parent=parent,
        asked_in=asked_in,
        sequence=telemetry.next_sequence(session),
        queued=queued,
        tool=tool,
        conversation_id=telemetry.conversation_id(session),
    )


def _request_context(session: Any) -> tuple[otel_context.Context, SpanContext | None]:
    """Where the handoff goes, and the span it was asked in when that is not its parent.

    Where it was requested, or the session's own trace when nothing was traced there
    (livekit-agents before 1.3 does not leave its session span current for the app's code). A
    span of LiveKit's own there (``agent_turn``, ``on_enter``) ends before the handoff does,
    which Jaeger flags: the handoff goes under the session's span instead, linked to that span.
    """
    current = otel_context.get_current()
    span = span_in(current)  # None where it holds none
    root = getattr(session, "_root_span_context", None)
    if span is None or not span.get_span_context().is_valid:
        return (root if root is not None else current), None
    if root is not None and _is_livekits(span) and span is not span_in(root):
        return root, span.get_span_context()
    return current, None


def _is_livekits(span: Any) -> bool:
    scope = getattr(span, "instrumentation_scope", None)
    return getattr(scope, "name", None) == LIVEKIT_SCOPE


async def wrap_update_activity_task(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The task `update_agent()` spawned: a handoff it ends without reaching `_update_activity`
    (one queued behind a handoff that failed raises) ends with it, seen on its way out of the task
    (no done callback: asyncio schedules each as a handle of its own, ~110 opcodes a handoff; and
    reading what a done task raised would mark it retrieved, hiding it from asyncio's report). A
    task cancelled before its first step never ran the handoff: nothing of it is sent."""
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        handoff = PENDING_HANDOFF.get()  # None once `_update_activity` took it
        if handoff is not None and not handoff.ended:
            guard("handoff task", handoff.fail, exc)
        raise
    handoff = PENDING_HANDOFF.get()
    if handoff is not None and not handoff.ended:
        guard("handoff task", handoff.end, sc.OUTCOME_SKIPPED)
    return result


# --- the handoff itself -----------------------------------------------------------------------
async def wrap_update_activity(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    try:
        handoff = _begin_update_activity(telemetry, instance, args, kwargs)
    except Exception as exc:
        report("_update_activity", exc)
        handoff = None
    if handoff is None:
        return await wrapped(*args, **kwargs)
    hook = telemetry.update_agent_hook
    if hook is not None:
        try:
            hook.wait_for(handoff, instance)
        except Exception as exc:
            report("update_agent span", exc)
    token = CURRENT_HANDOFF.set(handoff)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("_update_activity", handoff.fail, exc)
        if handoff.livekit_open:
            guard("_update_activity", handoff.left_update_activity)
        raise
    finally:
        CURRENT_HANDOFF.reset(token)
        if handoff.livekit_pending:  # LiveKit started no update_agent span (closing, or no old agent)
            guard("update_agent span", hook.release, handoff)
    try:
        if not handoff.ended:  # the start phase ends a completed handoff: nothing left to do then
            handoff.finish()
        if handoff.livekit_open:  # LiveKit's update_agent under ours (1.8.2+): it ended by now
            handoff.left_update_activity()
    except Exception as exc:
        report("_update_activity", exc)
    return result


def _begin_update_activity(
    telemetry: LiveKitTelemetry, session: Any, args: Any, kwargs: Any
) -> LiveKitHandoff | None:
    previous_activity = kwargs.get("previous_activity", sc.CLOSE)
    new_activity = kwargs.get("new_activity", sc.START)
    pending = PENDING_HANDOFF.get()
    if pending is not None:
        PENDING_HANDOFF.set(None)  # tasks spawned from here on must not see it
        if pending.is_for(session) and not pending.ended:
            pending.bind(previous_activity, new_activity, requested=True)
            return pending
    agent = args[0] if args else kwargs["agent"]
    if previous_activity == sc.PAUSE or new_activity == sc.RESUME:
        trigger = sc.TRIGGER_TASK  # an AgentTask entering or handing back
    elif session._activity is not None:
        trigger = sc.TRIGGER_API
    else:
        return None  # the session's first agent is not a handoff
    handoff = _new_handoff(telemetry, session, agent, trigger)
    try:
        handoff.bind(previous_activity, new_activity)
    except Exception:
        handoff.end(sc.OUTCOME_ERROR)  # never leave a started span behind
        raise
    return handoff


async def run_phase(
    telemetry: LiveKitTelemetry, phase: str, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """Wrapper of AgentActivity.drain/pause/aclose/start/resume: time the phase of a handoff."""
    handoff = CURRENT_HANDOFF.get()
    if handoff is None:
        return await wrapped(*args, **kwargs)
    reuse = kwargs.get("reuse_resources")
    try:
        mark = handoff.begin_phase(phase, instance, reuse)
    except Exception as exc:
        report(phase, exc)
        mark = None
    if mark is None:
        return await wrapped(*args, **kwargs)
    if getattr(reuse, "rt_session", None) is not None:
        guard("realtime updates", _watch_realtime_updates, telemetry, handoff, reuse.rt_session)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard(phase, handoff.end_phase, mark, exc)
        raise
    try:
        handoff.end_phase(mark, None)
    except Exception as exc:
        report(phase, exc)
    if phase in _NEW_ACTIVITY_PHASES and telemetry.features.connection_metrics:
        try:
            _watch_reconnects(telemetry, handoff, instance)
        except Exception as exc:
            report("reconnect", exc)
    return result


def wrap_create_speech_task(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """Time the new agent's on_enter from its task's first step, inside that task; the handoff
    whose start scheduled it ends with it."""
    if kwargs.get("name") != ON_ENTER_TASK_NAME:  # most speech tasks: nothing to look up
        return wrapped(*args, **kwargs)
    handoff = CURRENT_HANDOFF.get()
    if (
        handoff is None
        or handoff.ended
        or sc.START not in handoff.started_phases
        or (not args and "coro" not in kwargs)
    ):
        return wrapped(*args, **kwargs)
    if args:
        watched = handoff.watch_on_enter(args[0])
        args = (watched, *args[1:])
    else:
        watched = handoff.watch_on_enter(kwargs["coro"])
        kwargs = {**kwargs, "coro": watched}
    try:
        task = wrapped(*args, **kwargs)
    except BaseException:
        guard("on_enter", handoff.on_enter_never_ran)  # a task made before the raise times it late
        raise
    try:
        task.add_done_callback(functools.partial(_on_enter_done, handoff, watched))
    except Exception as exc:
        report("on_enter", exc)
    return task


def _on_enter_done(handoff: LiveKitHandoff, watched: Any, task: asyncio.Task[Any]) -> None:
    """The on_enter task is over; if it was cancelled before its first step (a session close),
    the coroutine that times it never ran, and the handoff ends here."""
    if handoff.on_enter_pending:
        guard("on_enter", _on_enter_gone, handoff, watched)


def _on_enter_gone(handoff: LiveKitHandoff, watched: Any) -> None:
    watched.close()  # never started: closed, it warns of nothing (LiveKit's own coroutine still does)
    handoff.on_enter_never_ran()


# --- LiveKit's own spans of the handoff (1.8.2+) -------------------------------------------------
_UPDATE_AGENT_ARGS = (UPDATE_AGENT_SPAN,)  # how `_update_activity` calls `tracer.start_span`
_START_SPAN = "start_span"


class UpdateAgentSpanHook:
    """LiveKit's tracer, seen only while a handoff of ours waits for its ``update_agent`` span.

    `_update_activity` starts that span with the ``start_span`` of its module's tracer, which starts
    every span of every turn too: wrapped on the class, each of them would pass through us between
    handoffs. Instead a ``start_span`` of ours shadows the method on that one tracer object while a
    handoff whose LiveKit spans record is in `_update_activity` and has not seen its span, and is
    gone again when none is (``core.shadow``: sessions in threads share the tracer).
    """

    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer
        self._shadows = Shadows()
        self._lock = threading.Lock()  # a hold and uninstrument() in two threads: never one after
        self._closed = False

    def wait_for(self, handoff: LiveKitHandoff, session: Any) -> None:
        """The handoff entered `_update_activity`: see the span LiveKit starts for it."""
        if not livekit_records(session):
            return  # LiveKit's telemetry is off: no tree to make, nothing to see
        with self._lock:
            if self._closed:
                return
            handoff.livekit_pending = True
            self._shadows.hold(self._tracer, _START_SPAN, self._shadow)

    def release(self, handoff: LiveKitHandoff) -> None:
        """Its span started, or `_update_activity` is over without one."""
        handoff.livekit_pending = False
        self._shadows.release(self._tracer, _START_SPAN)

    def close(self) -> None:
        """uninstrument(): the tracer as it was, whatever is in flight."""
        with self._lock:
            self._closed = True
            self._shadows.clear()

    def _shadow(self, previous: Any) -> Any:
        return functools.partial(start_livekit_span, self, previous)

    def original(self, previous: Any) -> Any:
        """The tracer's own ``start_span``: its own attribute we shadow, else its class's as the
        class has it now (another's wrapper included)."""
        return original(self._tracer, _START_SPAN, previous)


def start_livekit_span(hook: UpdateAgentSpanHook, previous: Any, *args: Any, **kwargs: Any) -> Any:
    """LiveKit's tracer starting a span while a handoff waits: its ``update_agent`` of a handoff of
    ours goes under that handoff's ``agent_handoff``, started now for it, so the handoff is one tree."""
    start_span = hook.original(previous)
    if args != _UPDATE_AGENT_ARGS or "context" in kwargs:
        return start_span(*args, **kwargs)  # any other span LiveKit starts meanwhile
    handoff = CURRENT_HANDOFF.get()
    if handoff is None or not handoff.livekit_pending:
        return start_span(*args, **kwargs)  # another session's, or a handoff not ours
    try:
        hook.release(handoff)
        parent = handoff.parent_of_livekit_spans()
    except Exception as exc:
        report("update_agent span", exc)
        parent = None
    if parent is None:
        return start_span(*args, **kwargs)
    span = start_span(*args, context=parent, **kwargs)
    guard("update_agent span", handoff.livekit_spans_started, span)
    return span


# --- why reuse did not happen ------------------------------------------------------------------
async def wrap_detach_reusable_resources(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    handoff = CURRENT_HANDOFF.get()
    try:
        resources = await wrapped(*args, **kwargs)
    except Exception:
        if handoff is not None and not handoff.ended:
            handoff.stt_blocked = handoff.realtime_blocked = [sc.BLOCKED_DETACH_FAILED]
        raise
    if handoff is not None and not handoff.ended:
        try:
            _explain_reuse(telemetry, handoff, instance, args, kwargs, resources)
        except Exception as exc:
            report("reuse reasons", exc)
    return resources


def _explain_reuse(
    telemetry: LiveKitTelemetry, handoff: LiveKitHandoff, old: Any, args: Any, kwargs: Any, resources: Any
) -> None:
    """After the framework decided: reasons only for what it did not hand over.

    What was not detached is untouched, so its conditions read as the framework read them;
    nothing is computed on the handoff's path when everything was reused.
    """
    if not handoff.leaves(old):
        return
    new = args[0] if args else kwargs["new_activity"]
    features = telemetry.features
    stt_reused = getattr(resources, "stt_pipeline", None) is not None
    realtime_reused = getattr(resources, "rt_session", None) is not None
    handoff.stt_blocked = [] if stt_reused else stt_blockers(old, new, features)
    handoff.realtime_blocked = [] if realtime_reused else realtime_blockers(old, new, features)


# --- what the reused realtime session was asked to change ---------------------------------------
def _watch_realtime_updates(telemetry: LiveKitTelemetry, handoff: LiveKitHandoff, rt_session: Any) -> None:
    """Patch the session's class on first sight (plugins override the update methods)."""
    handoff.realtime_session = weakref.ref(rt_session)
    for method, kind in sc.REALTIME_UPDATE_METHODS.items():
        wrap_where_defined(
            type(rt_session), method, functools.partial(_timed_update, kind), telemetry.lazily_wrapped
        )


def _timed_update(kind: str, original: Any) -> Any:
    """The wrapper of one update method, as async as the method it wraps."""
    wrapper = _timed_async_update if inspect.iscoroutinefunction(original) else _timed_sync_update
    return functools.partial(wrapper, kind)


def _updating_handoff(instance: Any) -> LiveKitHandoff | None:
    handoff = CURRENT_HANDOFF.get()
    if handoff is None or handoff.ended or handoff.realtime_session is None:
        return None
    return handoff if handoff.realtime_session() is instance else None


async def _timed_async_update(kind: str, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    handoff = _updating_handoff(instance)
    if handoff is None:
        return await wrapped(*args, **kwargs)
    start_ns = time.time_ns()
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("realtime update", handoff.record_realtime_update, kind, start_ns, exc)
        raise
    guard("realtime update", handoff.record_realtime_update, kind, start_ns, None)
    return result


def _timed_sync_update(kind: str, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    handoff = _updating_handoff(instance)
    if handoff is None:
        return wrapped(*args, **kwargs)
    start_ns = time.time_ns()
    try:
        result = wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("realtime update", handoff.record_realtime_update, kind, start_ns, exc)
        raise
    guard("realtime update", handoff.record_realtime_update, kind, start_ns, None)
    return result


# --- the replacement connection when nothing was reused ----------------------------------------
def _watch_reconnects(telemetry: LiveKitTelemetry, handoff: LiveKitHandoff, activity: Any) -> None:
    stt_reused, realtime_reused = handoff.reused.stt, handoff.reused.realtime_session
    rt_session = getattr(activity, "_rt_session", None)
    if not realtime_reused and rt_session is not None:
        _claim_or_watch(telemetry, handoff, rt_session, sc.RESOURCE_REALTIME_SESSION)
    recognition = getattr(activity, "_audio_recognition", None)
    # an audio recognition given no STT node (the activity had no STT: text, a realtime model)
    # opens no stream to reconnect; else the STT, a property that resolves the model: read once
    if stt_reused or not recognition or getattr(recognition, "_stt", True) is None:
        return
    stt = activity.stt
    if stt is not None:
        _claim_or_watch(telemetry, handoff, stt, sc.RESOURCE_STT)


def _claim_or_watch(telemetry: LiveKitTelemetry, handoff: LiveKitHandoff, key: Any, resource: str) -> None:
    early = telemetry.early_connections.pop(key, None)
    if early is not None and early[0] >= handoff.start_ns:
        handoff.record_reconnect(resource, early[1], early[0])
    else:
        telemetry.reconnect_watch[key] = (handoff, resource)


def wrap_connection_acquired(
    telemetry: LiveKitTelemetry,
    watched: Callable[[Any], Any],
    wrapped: Any,
    instance: Any,
    args: Any,
    kwargs: Any,
) -> Any:
    """`_report_connection_acquired` of a realtime session or STT stream: a reconnect, maybe.

    ``watched`` maps the reporting object to what a handoff watches (the session itself, or the
    stream's STT).
    """
    result = wrapped(*args, **kwargs)
    guard("connection acquired", lambda: _note_connection(telemetry, watched(instance), args, kwargs))
    return result


def _note_connection(telemetry: LiveKitTelemetry, key: Any, args: Any, kwargs: Any) -> None:
    acquire_time = float(args[0] if args else kwargs["acquire_time"])
    now = time.time_ns()
    watched = telemetry.reconnect_watch.pop(key, None)
    if watched is not None:
        handoff, resource = watched
        handoff.record_reconnect(resource, acquire_time, now)
    else:
        telemetry.early_connections[key] = (now, acquire_time)


# --- the first speech after a handoff -----------------------------------------------------------
def wrap_update_agent_state(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    result = wrapped(*args, **kwargs)
    # every state change of every turn passes here: the weak dictionary's own dict tested in C, not
    # its `__len__` in Python (an entry whose session is gone only sends us to find nothing)
    if (args[0] if args else kwargs.get("state")) == "speaking" and telemetry.awaiting_speech.data:
        guard("first speech", _note_first_speech, telemetry, instance, kwargs.get("start_time"))
    return result


def _note_first_speech(telemetry: LiveKitTelemetry, session: Any, start_time: float | None) -> None:
    handoff = telemetry.awaiting_speech.pop(session, None)
    activity = getattr(session, "_activity", None)
    if handoff is None or activity is None or not handoff.enters(activity.agent):
        return
    handoff.record_first_speech(
        int(start_time * 1e9) if start_time else time.time_ns(), published_audio_track()
    )


# --- a tool that returns an Agent after ctx.update() (tool executor, 1.6.0+) -------------------
# the agent a tool returned after its progress update, in the tool's task (1.8.x keeps it)
LATE_AGENT: ContextVar[Any] = ContextVar("otel_handoff_livekit_late_agent", default=None)


def wrap_make_update_output(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    output = wrapped(*args, **kwargs)
    guard("tool progress update", _note_update_output, telemetry, instance, output, kwargs)
    return output


def _note_update_output(telemetry: LiveKitTelemetry, run_ctx: Any, output: Any, kwargs: Any) -> None:
    if kwargs.get("call_id_suffix") != FINAL_UPDATE_SUFFIX:
        telemetry.progress_updates.setdefault(run_ctx, time.time_ns())
        return
    agent = getattr(output, "agent_task", None)
    if agent is None:
        return
    telemetry.tool_causes.pop(agent, None)  # noted by the make_tool_output inside; not a handoff
    if telemetry.features.tool_handoff_after_update == "deferred":
        call = run_ctx.function_call
        since = telemetry.progress_updates.get(run_ctx) or time.time_ns()
        telemetry.tool_causes[agent] = ToolCause(call.name, call.call_id, None, deferred_since_ns=since)
    else:
        LATE_AGENT.set(agent)  # for the rejection the framework logs next, in this task


class RejectedHandoffLog(logging.Filter):
    """Sees the framework's only signal of a refused tool handoff: its error log (1.6.0+).

    Installed on the ``livekit.agents`` logger; never drops or changes a record.
    """

    def __init__(self, telemetry: LiveKitTelemetry) -> None:
        super().__init__()
        self._telemetry = telemetry

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and REJECTED_AFTER_UPDATE in str(record.msg):
            guard("rejected tool handoff", _note_rejection, self._telemetry, record)
        return True


def _note_rejection(telemetry: LiveKitTelemetry, record: logging.LogRecord) -> None:
    from livekit.agents.voice.agent_activity import _AgentActivityContextVar

    activity = _AgentActivityContextVar.get(None)  # the tool runs in a task of its activity
    if activity is None:
        return
    session = activity._session
    span_context = trace.get_current_span().get_span_context()
    tool = ToolCause(
        str(getattr(record, "function", "")),
        str(getattr(record, "call_id", "")),
        span_context if span_context.is_valid else None,
    )
    # LATE_AGENT is None before 1.8.x: the framework drops the agent unseen
    handoff = _new_handoff(
        telemetry, session, LATE_AGENT.get(), sc.TRIGGER_TOOL, tool=tool, parent=otel_context.get_current()
    )
    handoff.reject(REJECTED_AFTER_UPDATE, activity.agent)


# --- a tool's handoff the app cancelled (`function_tools_executed` handler) ---------------------
def wrap_cancel_agent_handoff(
    telemetry: LiveKitTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """The app's ``function_tools_executed`` handler called ``ev.cancel_agent_handoff()``: the
    framework drops the agent its tool returned without a word; the request is a rejected handoff."""
    asked = getattr(instance, "_handoff_required", False) is True  # the first cancel only
    result = wrapped(*args, **kwargs)
    if asked and telemetry.tool_causes:
        guard("cancelled handoff", _note_cancelled, telemetry, instance)
    return result


def _note_cancelled(telemetry: LiveKitTelemetry, event: Any) -> None:
    from livekit.agents.voice.agent_activity import _AgentActivityContextVar

    calls = {call.call_id for call in event.function_calls}
    found = next((pair for pair in list(telemetry.tool_causes.items()) if pair[1].call_id in calls), None)
    activity = _AgentActivityContextVar.get(None)  # the reply task of the activity whose tool it was
    session = getattr(activity, "_session", None)
    if found is None or session is None:
        return
    agent, tool = found
    telemetry.tool_causes.pop(agent, None)
    handoff = _new_handoff(telemetry, session, agent, sc.TRIGGER_TOOL, tool=tool)
    handoff.reject(CANCELLED_BY_APP, activity.agent)
