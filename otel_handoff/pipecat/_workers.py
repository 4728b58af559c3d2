"""Handoffs between Pipecat's multi-agent workers (``pipecat.workers``, ``pipecat.bus``).

How one runs (pipecat-ai 1.14): an ``LLMWorker``'s ``@tool`` (``_track_tool_call``'s wrapper) calls
``activate_worker(target, deactivate_self=True)``, which waits until the tool call is done
(``_after_tool_calls``); ``PipelineWorker.activate_worker`` drains the worker's pipeline (a flush
probe that goes round the bridged pipelines, the session's included); ``BaseWorker.activate_worker``
sets the worker inactive and sends ``BusDeactivateWorkerMessage`` and ``BusActivateWorkerMessage``
on the bus; the target's bus task hands the latter to ``_handle_worker_activate``, and
``_maybe_activate`` runs its ``on_activated`` (an ``LLMWorker`` queues its tools and the activation's
messages). The session's assistant aggregator then holds the new model call until the old worker's
audio has stopped (1.13 and later), and the new worker's first output leaves its pipeline. A
transport's output (a real call's) plays the old audio before it lets the drain's flush probe
through: there the wait for the old audio is inside the drain, before its rest.

Each wrapper takes timestamps only; the handoff becomes one record, emitted by the process that
sees its end (the target's): handler, drain, bus crossing, setup, the wait for the old audio, first
output. Across processes the sender's part travels with the activation message, in its JSON
envelope (a key of ours in the message's ``__data__``, which Pipecat's deserializer sets as an
attribute we take off on receipt): the trace context of the sender's conversation and the sender's
phase times. Nothing is on the per-frame path: bus messages, edges and bridges are not wrapped;
the frames a handoff awaits come through the workers' own events, only while awaited.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import sys
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from pipecat.bus.adapters.base import TypeAdapter
from pipecat.frames import frames as pipecat_frames
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
)

from ..core import crossing
from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.emit import Emitted, emit
from ..core.faults import guard, report
from ..core.record import HandoffRecord, PhaseRecord
from ..core.shapes import code_names
from ..core.spans import HandoffTelemetry
from ._downlink import emit_first_speech, speech_started_ns, speech_stopped_ns
from ._frames import DOWNSTREAM, UPSTREAM, FrameAwaited, MarkedFrameAwaited
from ._output import SPEECH_STARTED, SPEECH_STOPPED

# the attribute an activation message carries a handoff in (the key of its JSON envelope)
KEY = "otel_handoff"
ENDED_BY_HANDED_ON = "handed_on"  # the new worker handed off again before its first output
ENDED_BY_BUS_STOPPED = "bus_stopped"  # the bus stopped (the session ended) before it


@dataclass
class _ToolCall:
    worker: Any
    start_ns: int
    name: str | None
    call_id: str | None


@dataclass
class WorkerHandoff:
    """One worker handoff, from its request until the new worker's first output."""

    start_ns: int
    from_worker: str | None
    to_worker: str
    trigger: str
    tool_name: str | None = None
    tool_call_id: str | None = None
    sequence: int = 0
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    stage_ns: int = 0  # when the phase now running began
    asked_ns: int = 0  # the worker asked (``activate_worker``): the handler's end
    from_inactive: bool = False  # the worker had handed off already: its target is active beside
    conversation: Conversation | None = None  # the sender's (in its process)
    conversation_id: str | None = None  # the sender's session's, carried to another process
    parent: otel_context.Context | None = None  # the sender's span, where the app traces one
    pending: int = 0  # id() of LLMWorker's held handover for this request (it holds the worker)
    awaited: list[FrameAwaited] = field(default_factory=list)
    emitted: Emitted | None = None
    done: bool = False
    speech_ns: int = 0  # the session started speaking before the first output was seen
    outcome_completed: bool = False
    stopped_ns: int = 0  # the drain's flush probe passed the session's output once the old audio ended
    session: Any = None  # the session whose next speech is the first speech (weakly), once awaited
    quiet_ns: int = 0  # when that speech was awaited from

    def phase(self, name: str, end_ns: int) -> None:
        """The phase that began at ``stage_ns`` ends at ``end_ns``; the next begins there."""
        if end_ns < self.stage_ns:
            end_ns = self.stage_ns
        self.phases[name] = PhaseRecord(name, self.stage_ns, end_ns)
        self.stage_ns = end_ns

    def carried(self) -> dict[str, Any]:
        """What the activation message carries of it to another process: the trace context of the
        sender's conversation and the sender's times; names only, never the conversation."""
        carrier: dict[str, Any] = {}
        parent = self.parent
        if parent is None and self.conversation is not None:
            parent = self.conversation._under_root(self.stage_ns)
        if parent is not None:
            crossing.inject(carrier, parent)
        carrier["handoff"] = {
            "conversation_id": self.conversation.conversation_id if self.conversation else None,
            "start_ns": self.start_ns,
            "sent_ns": self.stage_ns,
            "from": self.from_worker,
            "trigger": self.trigger,
            "tool_name": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "sequence": self.sequence,
            "from_inactive": self.from_inactive,
            "phases": [[p.name, p.start_ns, p.end_ns] for p in self.phases.values()],
        }
        return carrier


def _received(carrier: dict[str, Any], to_worker: str) -> WorkerHandoff | None:
    """The sender's part of a handoff, as another process's activation message carried it."""
    sent = carrier.get("handoff")
    if not isinstance(sent, dict):
        return None
    handoff = WorkerHandoff(
        start_ns=int(sent["start_ns"]),
        from_worker=sent.get("from"),
        to_worker=to_worker,
        trigger=sent.get("trigger") or sc.TRIGGER_API,
        tool_name=sent.get("tool_name"),
        tool_call_id=sent.get("tool_call_id"),
        sequence=int(sent.get("sequence") or 0),
        stage_ns=int(sent["sent_ns"]),
        from_inactive=bool(sent.get("from_inactive")),
        parent=crossing.extract(carrier),
        conversation_id=sent.get("conversation_id") if isinstance(sent.get("conversation_id"), str) else None,
    )
    for name, start_ns, end_ns in sent.get("phases") or ():
        if name in sc.PHASES:
            handoff.phases[name] = PhaseRecord(name, int(start_ns), int(end_ns))
    return handoff


@dataclass
class WorkersTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    conversations: weakref.WeakKeyDictionary[Any, Conversation] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    requests: weakref.WeakKeyDictionary[Any, list[WorkerHandoff]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    activating: weakref.WeakKeyDictionary[Any, WorkerHandoff] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    deferred: int = 0  # activations held in ``activating`` (an upper bound: their workers may be gone)
    awaiting: weakref.WeakKeyDictionary[Any, WorkerHandoff] = field(default_factory=weakref.WeakKeyDictionary)
    adapter: Any = None  # our JSONMessageSerializer adapter for activations
    shapes: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)
    sessions: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)
    speech: weakref.WeakKeyDictionary[Any, FrameAwaited] = field(default_factory=weakref.WeakKeyDictionary)
    # the session's assistant aggregator holds a model call asked for while the bot speaks (1.13+)
    holds_context: bool = False

    def __post_init__(self) -> None:
        self.adapter = CarryingAdapter(self)
        self.holds_context = _holds_context()

    def conversation(self, bus: Any, worker: Any) -> Conversation:
        """One conversation per bus (a session's workers share one): its handoffs' count and root,
        and the conversation id the app gave its session's ``PipelineWorker`` (Pipecat's own spans
        carry it), if the session is in this process."""
        found = self.conversations.get(bus)
        if found is None:
            found = self.conversations[bus] = Conversation(
                self, time.time_ns(), otel_context.Context(), _conversation_id(self, worker)
            )
        return found


def _conversation_id(telemetry: WorkersTelemetry, worker: Any) -> str | None:
    session = _session(telemetry, worker)[0]
    value = getattr(session() if session is not None else None, "_conversation_id", None)
    return value if isinstance(value, str) and value else None


_CALL: ContextVar[_ToolCall | None] = ContextVar("otel_handoff_workers_call", default=None)
_HANDING: ContextVar[WorkerHandoff | None] = ContextVar("otel_handoff_workers_handing", default=None)


def _current_parent() -> otel_context.Context | None:
    """The app's span, where it traces one around the tool; else None (the conversation's root)."""
    current = otel_context.get_current()
    return current if trace.get_current_span(current).get_span_context().is_valid else None


# --- a tool runs --------------------------------------------------------------------------------
def wrap_track_tool_call(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``LLMWorker._track_tool_call(method)`` (once per tool, at the worker's construction): the
    call, known to the handover it may ask for (which runs once the call is done, 1.8 and later)."""
    tracked = wrapped(*args, **kwargs)

    async def noted(*call_args: Any, **call_kwargs: Any) -> Any:
        if not telemetry.enabled:
            return await tracked(*call_args, **call_kwargs)
        params = call_kwargs.get("params", call_args[0] if call_args else None)
        call = _ToolCall(
            instance,
            time.time_ns(),
            getattr(params, "function_name", None),
            getattr(params, "tool_call_id", None),
        )
        token = _CALL.set(call)
        try:
            return await tracked(*call_args, **call_kwargs)
        finally:
            _CALL.reset(token)

    # what functools.wraps copies that Pipecat reads (the tool's name, docstring and signature),
    # set directly: a fifth of its work, for every tool of every worker built
    noted.__name__, noted.__qualname__ = tracked.__name__, tracked.__qualname__
    noted.__doc__, noted.__module__, noted.__wrapped__ = tracked.__doc__, tracked.__module__, tracked  # type: ignore[attr-defined]
    return noted


def _deactivating(args: Any, kwargs: Any) -> tuple[str | None, bool]:
    target = args[0] if args else kwargs.get("worker_name")
    return (target if isinstance(target, str) else None), bool(kwargs.get("deactivate_self", False))


# --- the worker asks ------------------------------------------------------------------------------
async def wrap_request(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``LLMWorker.activate_worker``: a handoff asked for, held until the tool call is done."""
    target, deactivate = _deactivating(args, kwargs)
    request = None
    if deactivate and target:
        try:  # inline, as on every step of a handoff's path below: no call layer per step
            request = _request(telemetry, instance, target)
        except Exception as exc:
            report("activate_worker", exc)
    if request is None:
        return await wrapped(*args, **kwargs)
    before = getattr(instance, "_pending_handover", None)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        try:
            _held(telemetry, instance, request, before)
        except Exception as exc:
            report("activate_worker", exc)


def _request(telemetry: WorkersTelemetry, worker: Any, target: str) -> WorkerHandoff | None:
    if not telemetry.enabled:
        return None
    handoff = _new(telemetry, worker, target)
    telemetry.requests.setdefault(worker, []).append(handoff)
    return handoff


def _new(telemetry: WorkersTelemetry, worker: Any, target: str) -> WorkerHandoff:
    """A handoff asked for now: by the worker's tool call, if one runs, else by the app."""
    call = _CALL.get()
    tool = call is not None and call.worker is worker
    now = time.time_ns()
    start_ns = call.start_ns if tool else now
    conversation = telemetry.conversation(getattr(worker, "_bus", None) or worker, worker)
    return WorkerHandoff(
        start_ns=start_ns,
        from_worker=getattr(worker, "name", None),
        to_worker=target,
        trigger=sc.TRIGGER_TOOL if tool else sc.TRIGGER_API,
        tool_name=call.name if tool else None,
        tool_call_id=call.call_id if tool else None,
        sequence=conversation.next_sequence(),
        stage_ns=start_ns,
        asked_ns=now,
        conversation=conversation,
        parent=_current_parent(),
    )


def _held(telemetry: WorkersTelemetry, worker: Any, request: WorkerHandoff, before: Any) -> None:
    """A request held for later replaces one held before it: that one will never run."""
    after = getattr(worker, "_pending_handover", None)
    if after is None or after is before:
        return
    request.pending = id(after)
    if before is None:
        return
    for dropped in telemetry.requests.get(worker, ()):
        if dropped.pending == id(before) and not dropped.done:
            telemetry.requests[worker].remove(dropped)
            dropped.done = True
            now = time.time_ns()
            dropped.phases.pop(sc.PHASE_HANDLER, None)
            _emit(telemetry, dropped, sc.OUTCOME_REJECTED, now, reason=sc.REJECTED_SUPERSEDED)
            return


def _take_request(telemetry: WorkersTelemetry, worker: Any, target: str) -> WorkerHandoff:
    """The worker's request for ``target`` (the latest), or a handoff the app asked for now."""
    requests = telemetry.requests.get(worker) or []
    for request in reversed(requests):
        if request.to_worker == target and not request.done:
            requests.remove(request)
            return request
    return _new(telemetry, worker, target)


# --- the old worker drains and hands over ---------------------------------------------------------
async def wrap_handover(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``PipelineWorker.activate_worker(target, deactivate_self=True)``: the drain, then the send."""
    target, deactivate = _deactivating(args, kwargs)
    handoff = None
    if deactivate and target:
        try:
            handoff = _handing(telemetry, instance, target)
        except Exception as exc:
            report("activate_worker", exc)
    if handoff is None:
        return await wrapped(*args, **kwargs)
    token = _HANDING.set(handoff)
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("activate_worker", _failed, telemetry, handoff, exc)
        raise
    finally:
        _HANDING.reset(token)


def _handing(telemetry: WorkersTelemetry, worker: Any, target: str) -> WorkerHandoff | None:
    if not telemetry.enabled:
        return None
    _hand_on(telemetry, worker)
    handoff = _take_request(telemetry, worker, target)
    handoff.pending = 0
    if handoff.trigger == sc.TRIGGER_TOOL:
        handoff.phase(sc.PHASE_HANDLER, handoff.asked_ns or time.time_ns())
    _watch_drain(telemetry, worker, handoff)
    return handoff


def _watch_drain(telemetry: WorkersTelemetry, worker: Any, handoff: WorkerHandoff) -> None:
    """A transport's output queues the drain's flush probe behind the audio it still has to play (a
    sync frame, in order): the drain then waits for the old worker's audio. The output ending its
    run of speech during the drain (its last write, noted once a run), and only then the probe
    reaching the session's sink, says so. Only where the session writes to a transport's output."""
    shape = _shape(telemetry, worker)
    if not shape.transport_output or not hasattr(pipecat_frames, "PipelineFlushFrame"):
        return  # no transport's output (nor a session), or no flush probe to queue behind its audio
    session = shape.session()
    if session is None:
        return
    through = MarkedFrameAwaited(
        session,
        DOWNSTREAM,
        (pipecat_frames.PipelineFlushFrame,),
        functools.partial(_probe_through, weakref.ref(worker), weakref.ref(session), handoff),
        SPEECH_STOPPED,
    )
    if through.listening:
        handoff.awaited.append(through)


def _probe_through(ref: Any, session_ref: Any, handoff: WorkerHandoff, now: int, probe: Any) -> None:
    worker = ref()
    if handoff.done or worker is None or sc.DRAIN in handoff.phases:
        return
    stopped = speech_stopped_ns(session_ref())
    ours = getattr(probe, "origin", None) == worker.name
    if ours and stopped is not None and handoff.stage_ns <= stopped <= now:
        handoff.stopped_ns = stopped  # held at the output until the old audio had been written


def _hand_on(telemetry: WorkersTelemetry, worker: Any) -> None:
    """The worker hands off again before its own first output: that handoff ends here."""
    earlier = telemetry.awaiting.pop(worker, None)
    if earlier is not None and not earlier.done:
        _finish(telemetry, earlier, time.time_ns(), ended_by=ENDED_BY_HANDED_ON)


def _failed(telemetry: WorkersTelemetry, handoff: WorkerHandoff, exc: BaseException) -> None:
    if handoff.done:
        return
    handoff.done = True
    for awaited in handoff.awaited:  # the drain's probe
        awaited.stop()
    handoff.awaited.clear()
    now = time.time_ns()
    cancelled = isinstance(exc, asyncio.CancelledError)
    handoff.phase(sc.DRAIN if sc.DRAIN not in handoff.phases else sc.PHASE_BUS_CROSSING, now)
    _emit(
        telemetry,
        handoff,
        sc.OUTCOME_SKIPPED if cancelled else sc.OUTCOME_ERROR,
        now,
        error=sc.ERROR_CANCELLED if cancelled else exc,
    )


# --- the activation goes on the bus ---------------------------------------------------------------
async def wrap_send(telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``BaseWorker.activate_worker``: deactivate self, send the activation (the bus crossing)."""
    target, deactivate = _deactivating(args, kwargs)
    handoff = None
    if target:
        try:
            handoff = _sending(telemetry, instance, target, deactivate)
        except Exception as exc:
            report("activate_worker", exc)
    if handoff is None:
        return await wrapped(*args, **kwargs)
    token = _HANDING.set(handoff)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("activate_worker", _failed, telemetry, handoff, exc)
        raise
    finally:
        _HANDING.reset(token)
    try:
        _sent(telemetry, instance, handoff)
    except Exception as exc:
        report("activate_worker", exc)
    return result


def _sending(telemetry: WorkersTelemetry, worker: Any, target: str, deactivate: bool) -> WorkerHandoff | None:
    if not telemetry.enabled:
        return None
    handoff = _HANDING.get()
    if handoff is None or handoff.to_worker != target or handoff.done:
        if not deactivate:
            return None  # activating another worker beside itself: not a handoff
        _hand_on(telemetry, worker)
        handoff = _take_request(telemetry, worker, target)  # a bus-only worker hands off
    now = time.time_ns()
    for awaited in handoff.awaited:  # the drain's probe, where it never reached the session
        awaited.stop()
    handoff.awaited.clear()
    if handoff.stopped_ns:  # the drain waited for the old audio to end, then finished
        handoff.phase(sc.PHASE_AWAIT_OLD_AUDIO, handoff.stopped_ns)
    handoff.phase(sc.DRAIN, now)
    handoff.from_inactive = not getattr(worker, "_active", True)
    return handoff


def _sent(telemetry: WorkersTelemetry, worker: Any, handoff: WorkerHandoff) -> None:
    """Sent: a target nobody knows is rejected now (Pipecat sends it to nobody, silently)."""
    if handoff.done:
        return
    target = handoff.to_worker
    registry = getattr(worker, "_registry", None)
    known = (registry is not None and target in registry) or any(
        getattr(w, "name", None) == target for w in _local_workers(worker)
    )
    if not known:
        handoff.done = True
        now = time.time_ns()
        handoff.phase(sc.PHASE_BUS_CROSSING, now)
        _emit(telemetry, handoff, sc.OUTCOME_REJECTED, now, reason=sc.REJECTED_UNKNOWN_AGENT)


def wrap_message_init(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``BusActivateWorkerMessage.__init__``: the activation a handoff sends carries it."""
    result = wrapped(*args, **kwargs)
    handoff = _HANDING.get()
    if handoff is not None and getattr(instance, "target", None) == handoff.to_worker:
        instance.__dict__[KEY] = handoff
    return result


# --- the new worker receives it --------------------------------------------------------------------
async def wrap_receive(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``BaseWorker._handle_worker_activate(message)``: the bus crossing ends, the setup begins."""
    message = args[0] if args else kwargs.get("message")
    carried = getattr(message, "__dict__", {}).pop(KEY, None) if message is not None else None
    handoff = None
    if carried is not None:
        try:
            handoff = _receiving(telemetry, instance, carried)
        except Exception as exc:
            report("activation", exc)
    if handoff is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        guard("activation", _failed_setup, telemetry, handoff, exc)
        raise
    if getattr(instance, "_active", False):
        try:
            _set_up(telemetry, instance, handoff)
        except Exception as exc:
            report("activation", exc)
    else:  # not started yet: it activates once it starts (``_maybe_activate``)
        telemetry.activating[instance] = handoff
        telemetry.deferred += 1
    return result


def _receiving(telemetry: WorkersTelemetry, worker: Any, carried: Any) -> WorkerHandoff | None:
    if not telemetry.enabled:
        return None
    name = getattr(worker, "name", None)
    if isinstance(carried, WorkerHandoff):
        handoff = carried if not carried.done else None
    elif isinstance(carried, dict) and name:
        handoff = _received(carried, name)  # from another process
    else:
        handoff = None
    if handoff is None:
        return None
    handoff.phase(sc.PHASE_BUS_CROSSING, time.time_ns())
    return handoff


def _failed_setup(telemetry: WorkersTelemetry, handoff: WorkerHandoff, exc: BaseException) -> None:
    if handoff.done:
        return
    handoff.done = True
    now = time.time_ns()
    handoff.phase(sc.PHASE_SETUP, now)
    cancelled = isinstance(exc, asyncio.CancelledError)
    _emit(
        telemetry,
        handoff,
        sc.OUTCOME_SKIPPED if cancelled else sc.OUTCOME_ERROR,
        now,
        error=sc.ERROR_CANCELLED if cancelled else exc,
    )


async def wrap_maybe_activate(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``BaseWorker._maybe_activate``: a deferred activation runs once the worker starts."""
    result = await wrapped(*args, **kwargs)
    if telemetry.deferred and getattr(instance, "_active", False):
        handoff = telemetry.activating.pop(instance, None)
        if handoff is not None:
            telemetry.deferred -= 1
            guard("activation", _set_up, telemetry, instance, handoff)
        elif not telemetry.activating:
            telemetry.deferred = 0  # the workers held were collected
    return result


# --- after the setup: the old audio, the first output ------------------------------------------------
def _set_up(telemetry: WorkersTelemetry, worker: Any, handoff: WorkerHandoff) -> None:
    if handoff.done:
        return
    now = time.time_ns()
    handoff.phase(sc.PHASE_SETUP, now)
    telemetry.awaiting[worker] = handoff
    shape = _shape(telemetry, worker)
    speaking = _speaking_session(shape)
    if speaking is not None and telemetry.holds_context and sc.PHASE_AWAIT_OLD_AUDIO not in handoff.phases:
        awaited = FrameAwaited(
            speaking,
            UPSTREAM,
            (BotStoppedSpeakingFrame,),
            functools.partial(_old_audio_stopped, telemetry, weakref.ref(worker), handoff),
        )
        if awaited.listening:
            handoff.awaited.append(awaited)
            return
    _await_output(telemetry, worker, shape, handoff, quiet=speaking is None)


def _old_audio_stopped(
    telemetry: WorkersTelemetry, ref: Any, handoff: WorkerHandoff, now: int, _: Any
) -> None:
    worker = ref()
    if handoff.done or worker is None:
        return
    handoff.phase(sc.PHASE_AWAIT_OLD_AUDIO, now)
    _await_output(telemetry, worker, _shape(telemetry, worker), handoff, quiet=True)


def _await_output(
    telemetry: WorkersTelemetry, worker: Any, shape: _Shape, handoff: WorkerHandoff, *, quiet: bool
) -> None:
    """The new worker's first output; and, where the bot is quiet now, the session's next start of speech."""
    kind = _AUDIO if shape.has_tts else _TEXT
    awaited = FrameAwaited(
        worker, DOWNSTREAM, kind, functools.partial(_first_output, telemetry, weakref.ref(worker), handoff)
    )
    if not awaited.listening:  # the app's own handler is on the sink's event: no first output of ours
        _finish(telemetry, handoff, handoff.stage_ns)
        return
    handoff.awaited.append(awaited)
    # the session's first start of speech from now on: awaited from here, as the new audio can reach
    # the output before the first output's handler runs (Pipecat runs it in a task of its own); where
    # the old audio still plays (before 1.13) the new follows it in one run of speech, unmarked
    session = shape.session() if shape.session is not None else None
    if session is not None and quiet:
        arrived = functools.partial(_first_speech, telemetry, handoff)
        speech = (  # the output's first write of the speech marked, where there is an output
            MarkedFrameAwaited(session, UPSTREAM, _SPEECH_STARTED, arrived, SPEECH_STARTED)
            if shape.transport_output
            else FrameAwaited(session, UPSTREAM, _SPEECH_STARTED, arrived)
        )
        if speech.listening:
            earlier = telemetry.speech.get(session)
            if earlier is not None:
                earlier.stop()  # a handoff whose new worker never spoke: no first speech for it
            telemetry.speech[session] = speech
            handoff.session, handoff.quiet_ns = weakref.ref(session), time.time_ns()


def _first_output(telemetry: WorkersTelemetry, ref: Any, handoff: WorkerHandoff, now: int, _: Any) -> None:
    worker = ref()
    if handoff.done or worker is None:
        return
    handoff.phase(sc.PHASE_FIRST_OUTPUT, now)
    awaiting = telemetry.awaiting.pop(worker, None)
    if awaiting is not None and awaiting is not handoff:
        telemetry.awaiting[worker] = awaiting  # a later handoff's (this one's output came late)
    _finish(telemetry, handoff, now)
    if handoff.speech_ns:  # the speech started before this handler ran
        _first_speech(telemetry, handoff, handoff.speech_ns, None)


def _first_speech(telemetry: WorkersTelemetry, handoff: WorkerHandoff, now: int, _: Any) -> None:
    """The session started speaking: until its output transport's first write of it, where known
    (the upstream ``BotStartedSpeakingFrame`` reaches the session's source some processors later);
    on a WebRTC transport with what the caller hears."""
    if handoff.emitted is None:
        handoff.speech_ns = now  # emitted with the handoff, once its first output is seen
    elif handoff.outcome_completed:
        session = handoff.session() if handoff.session is not None else None
        started = speech_started_ns(session)
        if started is not None and handoff.quiet_ns <= started <= now:
            now = started
        phase = PhaseRecord(sc.PHASE_FIRST_SPEECH, handoff.start_ns, max(now, handoff.start_ns))
        emit_first_speech(telemetry, handoff.emitted, phase, session)


def _finish(
    telemetry: WorkersTelemetry, handoff: WorkerHandoff, end_ns: int, ended_by: str | None = None
) -> None:
    if handoff.done:
        return
    handoff.done = True
    for awaited in handoff.awaited:
        awaited.stop()
    handoff.awaited.clear()
    if ended_by is not None:  # the phase it was in is cut short there
        name = sc.PHASE_FIRST_OUTPUT if sc.PHASE_SETUP in handoff.phases else sc.PHASE_SETUP
        if name not in handoff.phases:
            handoff.phase(name, end_ns)
    handoff.outcome_completed = ended_by is None
    _emit(telemetry, handoff, sc.OUTCOME_COMPLETED, end_ns, ended_by=ended_by)


def _emit(
    telemetry: WorkersTelemetry,
    handoff: WorkerHandoff,
    outcome: str,
    end_ns: int,
    *,
    reason: str | None = None,
    error: Any = None,
    ended_by: str | None = None,
) -> None:
    attributes: dict[str, Any] = {}
    if reason is not None:
        attributes[sc.REJECTION_REASON] = reason
    if handoff.from_inactive:
        attributes[sc.FROM_INACTIVE] = True
    if ended_by is not None:
        attributes[sc.ENDED_BY] = ended_by
    fields = dict(
        sequence=handoff.sequence,
        outcome=outcome,
        from_agent=handoff.from_worker,
        to_agent=handoff.to_worker,
        trigger=handoff.trigger,
        tool_name=handoff.tool_name,
        tool_call_id=handoff.tool_call_id,
        error=error,
        attributes=attributes,
        phases=list(handoff.phases.values()),
    )
    if handoff.conversation is not None:  # in the sender's process: under its conversation
        handoff.emitted = handoff.conversation.emit(
            start_ns=handoff.start_ns, end_ns=end_ns, parent=handoff.parent, **fields
        )
        return
    # from another process: under the context it carried (the sender's conversation), or a trace of its own
    parent = handoff.parent if handoff.parent is not None else otel_context.Context()
    end_ns = max(end_ns, handoff.start_ns)
    handoff.emitted = emit(
        telemetry,
        HandoffRecord(
            start_ns=handoff.start_ns,
            end_ns=end_ns,
            parent=parent,
            conversation_id=handoff.conversation_id,
            **fields,
        ),
    )


def bus_stopped(telemetry: WorkersTelemetry, bus: Any) -> None:
    """The bus stopped: what still awaits its first output ends, and the conversation's root."""
    now = time.time_ns()
    if telemetry.awaiting:
        for worker, handoff in list(telemetry.awaiting.items()):
            if getattr(worker, "_bus", None) is bus:
                telemetry.awaiting.pop(worker, None)
                _finish(telemetry, handoff, now, ended_by=ENDED_BY_BUS_STOPPED)
    if telemetry.speech:
        for session, speech in list(telemetry.speech.items()):
            if getattr(session, "_bus", None) is bus:
                telemetry.speech.pop(session, None)
                speech.stop()
    conversation = telemetry.conversations.pop(bus, None)
    if conversation is not None:
        conversation.end(now)


async def wrap_bus_stop(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``WorkerBus.stop``: the session's end (once a session)."""
    try:
        return await wrapped(*args, **kwargs)
    finally:
        if telemetry.enabled:
            guard("WorkerBus.stop", bus_stopped, telemetry, instance)


# --- what this process has of the session ----------------------------------------------------------
# the first output awaited: audio where the worker has a TTS, else text
_AUDIO, _TEXT, _SPEECH_STARTED = (TTSAudioRawFrame,), (LLMTextFrame,), (BotStartedSpeakingFrame,)


class _Shape(NamedTuple):
    """What a worker's process has of the session, found once per worker (its pipeline is fixed)."""

    has_tts: bool
    session: Any  # the worker whose pipeline bridges the agents to the output (weakly), or None
    aggregators: tuple[
        Any, ...
    ]  # its assistant aggregators (weakly): they hold the context while the bot speaks
    transport_output: bool  # its pipeline writes to a transport's output (``BaseOutputTransport``)


def _shape(telemetry: WorkersTelemetry, worker: Any) -> _Shape:
    found = telemetry.shapes.get(worker)
    if found is None:
        kinds = _contents((getattr(worker, "_pipeline", None),), [], 0, _TTS)
        found = telemetry.shapes[worker] = _Shape(bool(kinds & _TTS), *_session(telemetry, worker))
    return found


def _session(telemetry: WorkersTelemetry, worker: Any) -> tuple[Any, tuple[Any, ...], bool]:
    """The worker of this process that bridges the agents to the output, its assistant aggregators,
    and whether it writes to a transport's output; found in one walk of its pipeline, once per bus
    (a session's workers share one)."""
    bus = getattr(worker, "_bus", None)
    found = telemetry.sessions.get(bus) if bus is not None else None
    if found is not None and found[0] is not None and found[0]() is not None:
        return found
    found: tuple[Any, tuple[Any, ...], bool] = (None, (), False)
    for other in _local_workers(worker):
        if other is worker or getattr(other, "_bridged", None) is not None:
            continue  # a bridged worker is an agent, not the session
        aggregators: list[Any] = []
        kinds = _contents((getattr(other, "_pipeline", None),), aggregators, 0, 0)
        if aggregators and kinds & _BRIDGE:
            found = (weakref.ref(other), tuple(weakref.ref(a) for a in aggregators), bool(kinds & _OUTPUT))
            break
    if bus is not None and found[0] is not None:
        telemetry.sessions[bus] = found
    return found


# what a processor is, by its class, found once per class: a walk of a worker's pipeline (once per
# worker) costs a dictionary look-up per processor, and descends only into compound ones
_TTS, _AGGREGATOR, _BRIDGE, _COMPOUND, _OUTPUT = 1, 2, 4, 8, 16
_KINDS: dict[type, int] = {}


def _contents(processors: Any, aggregators: list[Any], depth: int, enough: int) -> int:
    """The kinds of processor in ``processors``, nested pipelines' too (all of them, or until those
    of ``enough`` are found); their assistant aggregators into ``aggregators``."""
    kinds = 0
    for processor in processors:
        kind = _KINDS.get(processor.__class__)
        if kind is None:
            kind = _kind(processor.__class__)
        if kind:
            if kind & _COMPOUND and depth < 32:
                kind |= _contents(processor.processors or (), aggregators, depth + 1, enough)
            if kind & _AGGREGATOR:
                aggregators.append(processor)
            kinds |= kind
            if enough and kinds & enough == enough:
                break
    return kinds


def _kind(cls: type) -> int:
    from pipecat.bus.bridge_processor import BusBridgeProcessor
    from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
    from pipecat.processors.frame_processor import FrameProcessor

    # not imported where the app has not: its import warns of a deprecated class it defines, and a
    # class can only be a TTS service (or a transport's output) once that module is loaded
    tts = getattr(sys.modules.get("pipecat.services.tts_service"), "TTSService", None)
    output = getattr(sys.modules.get("pipecat.transports.base_output"), "BaseOutputTransport", None)
    kind = 0
    if issubclass(cls, FrameProcessor):
        if tts is not None and issubclass(cls, tts):
            kind |= _TTS
        if output is not None and issubclass(cls, output):
            kind |= _OUTPUT
        if issubclass(cls, LLMAssistantAggregator):
            kind |= _AGGREGATOR
        if issubclass(cls, BusBridgeProcessor):
            kind |= _BRIDGE
        if cls.processors is not FrameProcessor.processors:  # a pipeline: it has processors
            kind |= _COMPOUND
    if len(_KINDS) < 4096:  # classes made at run time (rare) are not kept past that
        _KINDS[cls] = kind
    return kind


def _holds_context() -> bool:
    """Does the assistant aggregator hold the context pushed for appended messages while the bot
    speaks (``_maybe_push_context`` reading ``_bot_speaking``, 1.13 and later)? Read from its code."""
    from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator

    method = getattr(LLMAssistantAggregator, "_maybe_push_context", None)
    return method is not None and "_bot_speaking" in code_names(method)


def _local_workers(worker: Any) -> list[Any]:
    """The workers of this process on the worker's bus: its subscribers (every release has them)."""
    from pipecat.workers.base_worker import BaseWorker

    subscriptions = getattr(getattr(worker, "_bus", None), "_subscriptions", None) or {}
    found = [getattr(sub, "subscriber", None) for sub in list(subscriptions.values())]
    return [w for w in found if isinstance(w, BaseWorker)]


def _speaking_session(shape: _Shape) -> Any | None:
    """The session (of this process), if the bot speaks now: its assistant aggregator holds the
    new worker's first model call until the old audio stops."""
    session = shape.session() if shape.session is not None else None
    if session is not None and any(getattr(a(), "_bot_speaking", False) for a in shape.aggregators):
        return session
    return None


# --- the envelope ------------------------------------------------------------------------------------
class CarryingAdapter(TypeAdapter):
    """``JSONMessageSerializer``'s adapter for ``BusActivateWorkerMessage``: the message as its
    dataclass path writes it, plus our key where a handoff rides on it; read back as that path
    reads it (our key, not a field, is set as an attribute, taken off on receipt)."""

    def __init__(self, telemetry: WorkersTelemetry) -> None:
        self._telemetry = telemetry

    def serialize(self, obj: Any, serialize_value: Any) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if value is None:
                continue
            serialized = serialize_value(value)
            if serialized is not None:
                fields[f.name] = serialized
        carried = obj.__dict__.get(KEY)
        if carried is not None and self._telemetry.enabled:
            carrier = guard("carrying a handoff", _carrier, carried)
            if carrier is not None:
                fields[KEY] = carrier
        return fields

    def deserialize(
        self, data: dict[str, Any], deserialize_value: Any, target_type: type | None = None
    ) -> Any:
        cls = target_type
        if cls is None:  # Pipecat always passes the class it resolved
            return None
        init_fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        init_kwargs: dict[str, Any] = {}
        post_init: dict[str, Any] = {}
        for key, value in data.items():
            if key == KEY:
                post_init[key] = value  # plain JSON: our carrier
            elif key in init_fields:
                init_kwargs[key] = deserialize_value(value)
            else:
                post_init[key] = deserialize_value(value)
        for name, f in init_fields.items():
            if (
                name not in init_kwargs
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            ):
                init_kwargs[name] = None
        obj = cls(**init_kwargs)
        for key, value in post_init.items():
            setattr(obj, key, value)
        return obj


def _carrier(carried: Any) -> dict[str, Any] | None:
    if isinstance(carried, WorkerHandoff):
        return carried.carried()
    return carried if isinstance(carried, dict) else None  # forwarded (a proxy): as it came


def wrap_serializer_init(
    telemetry: WorkersTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``JSONMessageSerializer.__init__``: our adapter for activations, unless the app has one."""
    result = wrapped(*args, **kwargs)
    if telemetry.enabled:
        guard("JSONMessageSerializer.__init__", _register_adapter, telemetry, instance)
    return result


def _register_adapter(telemetry: WorkersTelemetry, serializer: Any) -> None:
    from pipecat.bus.messages import BusActivateWorkerMessage

    adapters = getattr(serializer, "_adapters", None)
    if isinstance(adapters, dict) and BusActivateWorkerMessage not in adapters:
        serializer.register_adapter(BusActivateWorkerMessage, telemetry.adapter)
