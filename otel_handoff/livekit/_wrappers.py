"""The wrapt wrappers the LiveKit instrumentor installs, one small function per wrap point.

Each wrapper does its own bookkeeping through ``guard`` (a fault of ours is logged once
and the framework call goes on untouched) and otherwise calls the original with the
same arguments, returning its value and letting its exceptions and cancellation through.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import semconv as sc
from .._faults import guard
from .._metrics import HandoffMetrics
from ._features import LiveKitFeatures
from ._handoff import CURRENT_HANDOFF, PENDING_HANDOFF, Handoff, ToolCause

ON_ENTER_TASK_NAME = "AgentTask_on_enter"


@dataclass
class Telemetry:
    """What every wrapper needs, built once at ``instrument()``."""

    tracer: trace.Tracer
    metrics: HandoffMetrics
    features: LiveKitFeatures
    static_attributes: dict[str, Any]
    sequences: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    # agent returned by a tool -> that tool; read when `update_agent(agent)` follows
    tool_causes: weakref.WeakKeyDictionary[Any, ToolCause] = field(default_factory=weakref.WeakKeyDictionary)

    def next_sequence(self, session: Any) -> int:
        value = self.sequences.get(session, 0) + 1
        self.sequences[session] = value
        return value


class TimedLock(asyncio.Lock):
    """An ``asyncio.Lock`` that reports how long a handoff waited for it.

    Swapped in for the session's and activities' locks at construction; with no handoff
    in the current task (or after ``uninstrument()``) it is a plain lock.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self._otel_handoff_kind = kind

    async def acquire(self) -> bool:
        handoff = CURRENT_HANDOFF.get()
        if handoff is None or handoff.ended or not (self.locked() or self._waiters):
            return await super().acquire()
        start_ns = time.time_ns()
        try:
            return await super().acquire()
        finally:
            guard("lock wait", handoff.record_lock_wait, self._otel_handoff_kind, start_ns, time.time_ns())


# --- construction: swap in timed locks ------------------------------------------------------
def wrap_session_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
    wrapped(*args, **kwargs)
    guard("AgentSession.__init__", _swap_lock, instance, "_activity_lock", sc.LOCK_SESSION)


def wrap_activity_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> None:
    wrapped(*args, **kwargs)
    guard("AgentActivity.__init__", _swap_lock, instance, "_lock", sc.LOCK_ACTIVITY)


def _swap_lock(instance: Any, attr: str, kind: str) -> None:
    lock = getattr(instance, attr, None)
    if type(lock) is asyncio.Lock and not lock.locked():
        setattr(instance, attr, TimedLock(kind))


# --- the request ------------------------------------------------------------------------------
def wrap_make_tool_output(telemetry: Telemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """Remember which tool returned an agent, for the `update_agent()` that follows."""
    output = wrapped(*args, **kwargs)
    guard("make_tool_output", _note_tool_cause, telemetry, output)
    return output


def _note_tool_cause(telemetry: Telemetry, output: Any) -> None:
    agent = getattr(output, "agent_task", None)
    if agent is None:
        return
    call = output.fnc_call
    span_context = trace.get_current_span().get_span_context()
    telemetry.tool_causes[agent] = ToolCause(
        call.name, call.call_id, span_context if span_context.is_valid else None
    )


def wrap_update_agent(telemetry: Telemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """`update_agent()` is where a tool's or the app's handoff is requested: start timing here."""
    handoff = guard("update_agent", _request_handoff, telemetry, instance, args, kwargs)
    if handoff is None:
        return wrapped(*args, **kwargs)
    token = PENDING_HANDOFF.set(handoff)
    try:
        return wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("update_agent", handoff.fail, exc)
        raise
    finally:
        PENDING_HANDOFF.reset(token)
        guard("update_agent", _watch_handoff_task, instance, handoff)


def _request_handoff(telemetry: Telemetry, session: Any, args: Any, kwargs: Any) -> Handoff | None:
    if not session._started:
        return None  # before start() this only chooses the first agent
    agent = args[0] if args else kwargs["agent"]
    previous_task = getattr(session, "_update_activity_atask", None)
    queued = telemetry.features.queue_wait and previous_task is not None and not previous_task.done()
    tool = telemetry.tool_causes.pop(agent, None)
    return Handoff(
        telemetry,
        session,
        agent,
        trigger=sc.TRIGGER_TOOL if tool is not None else sc.TRIGGER_API,
        parent=otel_context.get_current(),
        sequence=telemetry.next_sequence(session),
        queued=queued,
        tool=tool,
    )


def _watch_handoff_task(session: Any, handoff: Handoff) -> None:
    """End the span even if the handoff task dies before reaching `_update_activity`."""
    task = getattr(session, "_update_activity_atask", None)
    if task is None or task.done():
        handoff.end(sc.OUTCOME_SKIPPED)
        return
    task.add_done_callback(lambda t: guard("handoff task", _end_with_task, handoff, t))


def _end_with_task(handoff: Handoff, task: asyncio.Task[Any]) -> None:
    if handoff.ended:
        return
    if task.cancelled():
        handoff.fail(asyncio.CancelledError())
    elif (error := task.exception()) is not None:
        handoff.fail(error)
    else:
        handoff.end(sc.OUTCOME_SKIPPED)


# --- the handoff itself -----------------------------------------------------------------------
async def wrap_update_activity(
    telemetry: Telemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    handoff = guard("_update_activity", _begin_update_activity, telemetry, instance, args, kwargs)
    if handoff is None:
        return await wrapped(*args, **kwargs)
    token = CURRENT_HANDOFF.set(handoff)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("_update_activity", handoff.fail, exc)
        raise
    finally:
        CURRENT_HANDOFF.reset(token)
    guard("_update_activity", handoff.finish)
    return result


def _begin_update_activity(telemetry: Telemetry, session: Any, args: Any, kwargs: Any) -> Handoff | None:
    previous_activity = kwargs.get("previous_activity", sc.CLOSE)
    new_activity = kwargs.get("new_activity", sc.START)
    pending = PENDING_HANDOFF.get()
    if pending is not None:
        PENDING_HANDOFF.set(None)  # tasks spawned from here on must not see it
        if pending.is_for(session) and not pending.ended:
            pending.bind(previous_activity, new_activity)
            return pending
    agent = args[0] if args else kwargs["agent"]
    if previous_activity == sc.PAUSE or new_activity == sc.RESUME:
        trigger = sc.TRIGGER_TASK  # an AgentTask entering or handing back
    elif session._activity is not None:
        trigger = sc.TRIGGER_API
    else:
        return None  # the session's first agent is not a handoff
    handoff = Handoff(
        telemetry,
        session,
        agent,
        trigger=trigger,
        parent=otel_context.get_current(),
        sequence=telemetry.next_sequence(session),
        queued=False,
    )
    handoff.bind(previous_activity, new_activity)
    return handoff


async def _run_phase(phase: str, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    handoff = CURRENT_HANDOFF.get()
    mark = None
    if handoff is not None:
        mark = guard(phase, handoff.begin_phase, phase, instance, kwargs.get("reuse_resources"))
    if mark is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard(phase, handoff.end_phase, mark, exc)
        raise
    guard(phase, handoff.end_phase, mark, None)
    return result


async def wrap_drain(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await _run_phase(sc.DRAIN, wrapped, instance, args, kwargs)


async def wrap_pause(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await _run_phase(sc.PAUSE, wrapped, instance, args, kwargs)


async def wrap_aclose(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await _run_phase(sc.CLOSE, wrapped, instance, args, kwargs)


async def wrap_start(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await _run_phase(sc.START, wrapped, instance, args, kwargs)


async def wrap_resume(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    return await _run_phase(sc.RESUME, wrapped, instance, args, kwargs)


def wrap_create_speech_task(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """Time the new agent's on_enter from its task's first step, inside that task."""
    handoff = CURRENT_HANDOFF.get()
    if (
        handoff is None
        or handoff.ended
        or sc.START not in handoff.started_phases
        or kwargs.get("name") != ON_ENTER_TASK_NAME
        or (not args and "coro" not in kwargs)
    ):
        return wrapped(*args, **kwargs)
    if args:
        args = (handoff.run_on_enter(args[0]), *args[1:])
    else:
        kwargs = {**kwargs, "coro": handoff.run_on_enter(kwargs["coro"])}
    return wrapped(*args, **kwargs)
