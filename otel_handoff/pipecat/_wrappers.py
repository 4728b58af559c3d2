"""The wrapt wrappers the Pipecat Flows instrumentor installs, one small function per wrap point.

How a transition runs (``pipecat/flows/manager.py``): the model calls a Flows function; its
``transition_func`` runs the app's handler (``_call_handler``, or ``FlowsDirectFunctionWrapper
.invoke``), stores the next node in ``_pending_transition`` and hands the result to the context
aggregator through ``params.result_callback``; the aggregator later calls
``_check_and_execute_transition``, which waits until no other function call is in progress, and
``_set_node`` runs the pre-actions, the context update (``_update_llm_context``, with
``_create_conversation_summary`` for RESET_WITH_SUMMARY) and the post-actions. The app can also
call ``set_node_from_config``. Each wrapper calls the original with the same arguments and returns
its value; our bookkeeping runs through ``guard``, so a fault of ours never reaches the call.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from pipecat.pipeline.worker import PipelineWorker

from ..core import schema as sc
from ..core.faults import guard
from ..core.record import PhaseRecord
from ._observer import WorkerWatch
from ._transition import FlowState, FlowsTelemetry, Transition


@dataclasses.dataclass
class _ToolCall:
    start_ns: int
    name: str | None
    call_id: str | None
    pending_before: Any = None  # Flows' pending transition when the call began (another call's)
    handler: PhaseRecord | None = None


_CALL: ContextVar[_ToolCall | None] = ContextVar("otel_handoff_flows_call", default=None)
_EXECUTING: ContextVar[Transition | None] = ContextVar("otel_handoff_flows_executing", default=None)
_API_REQUEST: ContextVar[int | None] = ContextVar("otel_handoff_flows_api", default=None)
_CURRENT: ContextVar[Transition | None] = ContextVar("otel_handoff_flows_current", default=None)


def _node_name(node_config: Any) -> str | None:
    """A node's name as Flows names it (``NodeConfig["name"]``), if it has one yet."""
    name = node_config.get("name") if isinstance(node_config, dict) else None
    return name if isinstance(name, str) else None


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _parent(flow_manager: Any, trigger: str) -> otel_context.Context | None:
    """Pipecat's current turn when its tracing is on; the app's span for an api call; else None."""
    tracing = getattr(getattr(flow_manager, "_llm", None), "_tracing_context", None)
    turn = tracing.get_turn_context() if tracing is not None else None
    if turn is not None and trace.get_current_span(turn).get_span_context().is_valid:
        return _with_turn_span(flow_manager, turn)
    if trigger == sc.TRIGGER_API:
        current = otel_context.get_current()
        if trace.get_current_span(current).get_span_context().is_valid:
            return current
    return None  # one root per conversation


def _with_turn_span(flow_manager: Any, turn: otel_context.Context) -> otel_context.Context:
    """The turn with Pipecat's own span in it, where its turn trace observer still holds it.

    Pipecat hands its services the turn as a span context (a ``NonRecordingSpan``), which never
    says that the turn ended; the turn ends when the user speaks again or the pipeline ends, which
    can come before the new node's first speech (or the transition's end). With the span itself,
    the emitter sees that and puts what outlives the turn under the conversation, linked to the
    turn, as for any parent that ended first: no span of ours ends after its parent."""
    observer = getattr(getattr(flow_manager, "_worker", None), "turn_trace_observer", None)
    span = getattr(observer, "_current_span", None)
    if not isinstance(span, trace.Span):
        return turn
    found, wanted = span.get_span_context(), trace.get_current_span(turn).get_span_context()
    if (found.trace_id, found.span_id) != (wanted.trace_id, wanted.span_id):
        return turn
    return trace.set_span_in_context(span, turn)


# --- the flow manager's life ------------------------------------------------------------------
def wrap_init(telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    if telemetry.enabled:
        guard("FlowManager.__init__", _watch_worker, telemetry, instance)
    return result


def _watch_worker(telemetry: FlowsTelemetry, flow_manager: Any) -> None:
    """First speech through an observer on the worker; the conversation's end through its event."""
    state = telemetry.state(flow_manager)
    worker = getattr(flow_manager, "_worker", None)
    # a real worker only: a test double (Pipecat's own tests pass an AsyncMock) would answer our
    # calls with coroutines nobody awaits, a warning each in the app's tests
    if worker is not None and issubclass(type(worker), PipelineWorker):
        state.watch = WorkerWatch(telemetry, state, worker)


# --- a tool asks for a transition ---------------------------------------------------------------
async def wrap_create_transition_func(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    transition_func = await wrapped(*args, **kwargs)
    if not telemetry.enabled:
        return transition_func

    async def traced_transition_func(params: Any) -> None:
        call = _ToolCall(
            time.time_ns(),
            getattr(params, "function_name", None),
            getattr(params, "tool_call_id", None),
            getattr(instance, "_pending_transition", None),
        )
        traced = guard("transition_func", _with_request_hook, telemetry, instance, params, call)
        token = _CALL.set(call)
        try:
            return await transition_func(traced if traced is not None else params)
        finally:
            _CALL.reset(token)

    return traced_transition_func


def _with_request_hook(telemetry: FlowsTelemetry, flow_manager: Any, params: Any, call: _ToolCall) -> Any:
    """The same params, with a result callback that sees the next node the handler returned.

    Flows stores the next node just before it hands the result on; the aggregator may run the
    transition any time after that, so the request is noted there, not after the call returns.
    """
    result_callback = params.result_callback

    async def noting_result_callback(*cb_args: Any, **cb_kwargs: Any) -> Any:
        guard("result_callback", _note_request, telemetry, flow_manager, call)
        return await result_callback(*cb_args, **cb_kwargs)

    return _copy_with(params, "result_callback", noting_result_callback)


def _copy_with(obj: Any, name: str, value: Any) -> Any:
    """A shallow copy of ``obj`` with one attribute set, as ``dataclasses.replace`` makes for
    ``FunctionCallParams``, by its ``__dict__``: about 20 opcodes, where ``replace`` walks the
    fields (330) and ``copy.copy`` dispatches by protocol (160), on every tool transition."""
    try:
        copied = object.__new__(type(obj))
        copied.__dict__.update(obj.__dict__)
    except (AttributeError, TypeError):  # slots, or a type object.__new__ cannot make
        copied = copy.copy(obj)
    object.__setattr__(copied, name, value)
    return copied


def _note_request(telemetry: FlowsTelemetry, flow_manager: Any, call: _ToolCall) -> None:
    pending = getattr(flow_manager, "_pending_transition", None)
    if not telemetry.enabled or not pending or not pending.get("next_node"):
        return  # a node function (no next node): not a handoff
    if pending is call.pending_before:
        return  # another call's transition, still waiting: this call asked for none
    now = time.time_ns()
    state = telemetry.state(flow_manager)
    transition = Transition(
        trigger=sc.TRIGGER_TOOL,
        start_ns=call.start_ns,
        parent=_parent(flow_manager, sc.TRIGGER_TOOL),
        sequence=state.conversation.next_sequence(),
        tool_name=call.name,
        tool_call_id=call.call_id,
        requested_ns=now,
        from_node=flow_manager._current_node,
        to_node=_node_name(pending["next_node"]),
    )
    if call.handler is not None:
        transition.phases[sc.PHASE_HANDLER] = call.handler
    state.request(transition)


async def wrap_call_handler(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    call = _CALL.get()
    if call is None or not telemetry.enabled:
        return await wrapped(*args, **kwargs)
    # from the Flows function's start: Flows' own steps before the app's handler are its call
    phase = PhaseRecord(sc.PHASE_HANDLER, call.start_ns)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        phase.end_ns = time.time_ns()
        call.handler = phase


async def wrap_check_and_execute(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    transition = (
        guard("_check_and_execute_transition", _ready, telemetry, instance) if telemetry.enabled else None
    )
    if transition is None:
        return await wrapped(*args, **kwargs)
    token = _EXECUTING.set(transition)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _EXECUTING.reset(token)


def _ready(telemetry: FlowsTelemetry, flow_manager: Any) -> Transition | None:
    """The pending transition, if Flows is about to run it now; else note that it waits."""
    state = telemetry.flows.get(flow_manager)
    transition = state.pending if state is not None else None
    if transition is None or not getattr(flow_manager, "_pending_transition", None):
        return None
    if flow_manager._context_aggregator.assistant().has_function_calls_in_progress:
        transition.waited = True  # another function call is still running: Flows waits for it
        return None
    if transition.waited:
        transition.phases[sc.PHASE_FUNCTION_CALL_WAIT] = PhaseRecord(
            sc.PHASE_FUNCTION_CALL_WAIT, transition.requested_ns, time.time_ns()
        )
    return transition


# --- the app asks --------------------------------------------------------------------------------
async def wrap_set_node_from_config(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    token = _API_REQUEST.set(time.time_ns())
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _API_REQUEST.reset(token)


# --- the new node is set ------------------------------------------------------------------------
async def wrap_set_node(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    begun = (
        guard("FlowManager._set_node", _begin, telemetry, instance, args, kwargs)
        if telemetry.enabled
        else None
    )
    if begun is None:
        return await wrapped(*args, **kwargs)
    state, transition = begun
    token = _CURRENT.set(transition)
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        outcome = sc.OUTCOME_SKIPPED if isinstance(exc, asyncio.CancelledError) else sc.OUTCOME_ERROR
        error = None if isinstance(exc, asyncio.CancelledError) else exc
        guard("FlowManager._set_node", state.emit, transition, outcome, time.time_ns(), error)
        raise
    finally:
        _CURRENT.reset(token)
    guard("FlowManager._set_node", _end, state, transition)
    return result


def _begin(
    telemetry: FlowsTelemetry, flow_manager: Any, args: Any, kwargs: Any
) -> tuple[FlowState, Transition] | None:
    state = telemetry.state(flow_manager)
    if not getattr(flow_manager, "_initialized", False) or flow_manager._current_node is None:
        return None  # the first node is not a handoff
    now = time.time_ns()
    transition = _EXECUTING.get()
    if transition is not None and transition is state.pending:
        state.pending = None
    else:
        requested = _API_REQUEST.get() or now
        transition = Transition(
            trigger=sc.TRIGGER_API,
            start_ns=requested,
            parent=_parent(flow_manager, sc.TRIGGER_API),
            sequence=state.conversation.next_sequence(),
            requested_ns=requested,
        )
        state.drop_pending(now)  # Flows drops a tool's pending transition for this one
    _note_delivery(transition, now)
    node_config = _arg(args, kwargs, 1, "node_config") or {}
    strategy = node_config.get("context_strategy") or getattr(flow_manager, "_context_strategy", None)
    transition.from_node = flow_manager._current_node
    transition.to_node = _arg(args, kwargs, 0, "node_id")
    transition.context_strategy = getattr(getattr(strategy, "strategy", None), "value", None)
    transition.executing_ns = now
    return state, transition


def _note_delivery(transition: Transition, now: int) -> None:
    """The function result's trip back to Flows: from the handler's end (Flows hands the result to
    the LLM service's callback, which pushes it to the assistant aggregator; the aggregator's task
    calls ``_check_and_execute_transition``) until ``_set_node`` begins; after the wait for other
    function calls, when there was one."""
    if transition.trigger != sc.TRIGGER_TOOL:
        return
    wait, handler = (
        transition.phases.get(sc.PHASE_FUNCTION_CALL_WAIT),
        transition.phases.get(sc.PHASE_HANDLER),
    )
    begun = (
        wait.end_ns
        if wait is not None and wait.end_ns
        else (handler.end_ns if handler is not None and handler.end_ns else transition.requested_ns)
    )
    if begun and begun <= now:
        transition.phases[sc.PHASE_DELIVERY] = PhaseRecord(sc.PHASE_DELIVERY, begun, now)


def _end(state: FlowState, transition: Transition) -> None:
    transition.set_ns = time.time_ns()
    _node_set_up_until_post_actions(transition)
    state.emit(transition, sc.OUTCOME_COMPLETED, transition.set_ns)
    state.awaiting_speech = transition
    if state.watch is not None:
        state.watch.await_speech()


def _node_set_up_until_post_actions(transition: Transition) -> None:
    """After ``_update_llm_context`` Flows makes the node current and asks the model to respond (an
    ``LLMRunFrame`` queued on the worker, a path every frame takes, so not wrapped): the node's
    set-up too. The context update runs on to the post-actions, or to ``_set_node``'s end."""
    update = transition.phases.get(sc.PHASE_CONTEXT_UPDATE)
    if update is None or not update.end_ns:
        return
    post = transition.phases.get(sc.PHASE_POST_ACTIONS)
    update.end_ns = max(update.end_ns, post.start_ns if post is not None else transition.set_ns)


# --- phases inside _set_node --------------------------------------------------------------------
async def wrap_execute_actions(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    pre = _arg(args, kwargs, 0, "pre_actions")
    actions = pre or _arg(args, kwargs, 1, "post_actions") or ()
    return await _timed(
        telemetry, sc.PHASE_PRE_ACTIONS if pre else sc.PHASE_POST_ACTIONS, wrapped, args, kwargs, actions
    )


async def wrap_update_llm_context(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    return await _timed(telemetry, sc.PHASE_CONTEXT_UPDATE, wrapped, args, kwargs)


async def wrap_create_summary(
    telemetry: FlowsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    return await _timed(telemetry, sc.PHASE_SUMMARY, wrapped, args, kwargs)


async def _timed(
    telemetry: FlowsTelemetry,
    name: str,
    wrapped: Any,
    args: Any,
    kwargs: Any,
    actions: Any = (),
) -> Any:
    """Time phase ``name`` of the transition being set, if any (``actions``: Flows' action configs)."""
    transition = _CURRENT.get()
    if transition is None or not telemetry.enabled:
        return await wrapped(*args, **kwargs)
    types = [str(a.get("type")) for a in actions if isinstance(a, dict)] if actions else None
    attributes = {sc.ACTIONS: types} if types else None
    started = time.time_ns()
    if name == sc.PHASE_CONTEXT_UPDATE:  # from where Flows sets the node up: after the pre-actions
        pre = transition.phases.get(sc.PHASE_PRE_ACTIONS)
        started = min(
            started,
            (pre.end_ns if pre is not None and pre.end_ns else 0) or transition.executing_ns or started,
        )
    phase = transition.phases[name] = PhaseRecord(name, started, attributes=attributes)
    try:
        return await wrapped(*args, **kwargs)
    except asyncio.CancelledError:
        if name == sc.PHASE_SUMMARY:  # Flows' 5 s wait_for gave up on it and falls back to APPEND
            phase.error = sc.ERROR_TIMEOUT
        raise
    finally:
        phase.end_ns = time.time_ns()
