"""The wrappers: framework call -> timestamps in a run's or session's state -> one record.

Each passes the SDK's arguments, return values, exceptions and cancellation through unchanged;
a fault of ours is reported once and the call goes on as if we were not there.
"""

from __future__ import annotations

import time
from typing import Any

from ..core.faults import report
from ..core.instrumentor import wrap_where_defined
from . import _realtime, _text
from ._text import RUN, AgentsTelemetry, TextRun


def _start_run(telemetry: AgentsTelemetry, kwargs: dict[str, Any]) -> TextRun | None:
    if not telemetry.enabled:
        return None
    try:
        return TextRun(telemetry, time.time_ns(), _text.conversation_id(kwargs))
    except Exception as exc:
        report("Runner.run", exc)
        return None


def _finish(run: TextRun) -> None:
    try:
        run.finish(time.time_ns())
    except Exception as exc:
        report("run end", exc)


async def wrap_run(telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentRunner.run`` (``Runner.run`` and ``run_sync`` come through it): one run's state."""
    run = _start_run(telemetry, kwargs)
    if run is None:
        return await wrapped(*args, **kwargs)
    token = RUN.set(run)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        RUN.reset(token)
        _finish(run)


def wrap_run_streamed(telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``AgentRunner.run_streamed``: the run loop's task inherits the run; its end ends the run."""
    run = _start_run(telemetry, kwargs)
    if run is None:
        return wrapped(*args, **kwargs)
    token = RUN.set(run)
    try:
        result = wrapped(*args, **kwargs)
    except BaseException:
        _finish(run)
        raise
    finally:
        RUN.reset(token)
    task = getattr(result, "run_loop_task", None)
    if task is None:
        _finish(run)
    else:
        task.add_done_callback(lambda _task: _finish(run))
    return result


async def wrap_execute_handoffs(
    telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``run_internal.turn_resolution.execute_handoffs``: the handoff the SDK runs (and rejects)."""
    handoff = None
    call_kwargs = kwargs
    if telemetry.enabled:
        try:
            handoff, call_kwargs = _text.begin(telemetry, kwargs)
        except Exception as exc:
            report("execute_handoffs", exc)
            handoff, call_kwargs = None, kwargs
    if handoff is None:
        return await wrapped(*args, **kwargs)
    try:
        result = await wrapped(*args, **call_kwargs)
    except BaseException as error:
        try:
            _text.failed(handoff, error)
        except Exception as exc:
            report("execute_handoffs", exc)
        raise
    try:
        _text.executed(handoff, call_kwargs)
    except Exception as exc:
        report("execute_handoffs", exc)
    return result


def wrap_model_run_context(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``run_loop.model_run_context``: around every non-streamed model call of a run."""
    run = RUN.get()
    inner = wrapped(*args, **kwargs)
    return inner if run is None else _text.ObservedModelCall(inner, run)


def wrap_model_run_context_stream(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``run_loop.model_run_context_stream``: around every streamed model call of a run. Item by
    item only when a handoff waits for this call's first delta; otherwise only its end."""
    run = RUN.get()
    stream = wrapped(*args, **kwargs)
    if run is None:
        return stream
    if run.pending is not None:
        return _text.observed_stream(stream, run)
    return _text.StreamEnd(stream, run)


# --- realtime sessions ----------------------------------------------------------------------------


def wrap_session_init(telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``RealtimeSession.__init__``: the session's state, and its model's ``send_event`` observed."""
    wrapped(*args, **kwargs)
    if telemetry.enabled:
        try:
            telemetry.sessions[instance] = _realtime.SessionState(telemetry, instance)
            _realtime.refresh_watched(telemetry)
            # the session's model class's send_event, where it is defined (undone at uninstrument())
            wrap_where_defined(
                type(instance._model),
                "send_event",
                lambda _original: wrap_send_event,
                telemetry.lazily_wrapped,
            )
        except Exception as exc:
            report("RealtimeSession.__init__", exc)


def wrap_send_event(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A realtime model's ``send_event``: what a handoff sends (``session.update``, tool output).
    Outside a handoff's tool call (each ``send_audio``, say) the SDK's own coroutine, untouched."""
    call = _realtime.CALL.get()
    if call is not None:
        try:
            call.sending(args[0] if args else kwargs.get("event"), time.time_ns())
        except Exception as exc:
            report("send_event", exc)
    return wrapped(*args, **kwargs)


def wrap_on_event(telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``RealtimeSession.on_event``: every model event, when the session receives it. An event of a
    type nobody needs now (an audio delta with no handoff awaiting output) costs one set test, and
    the SDK's own coroutine is returned as it is."""
    try:
        event = args[0]  # the SDK passes it positionally: the fast path is a subscript and a set test
        if event.type in telemetry.watched:
            _observe(telemetry, instance, event)
    except (IndexError, AttributeError):
        event = kwargs.get("event")
        if getattr(event, "type", None) in telemetry.watched:
            _observe(telemetry, instance, event)
    return wrapped(*args, **kwargs)


def _observe(telemetry: AgentsTelemetry, session: Any, event: Any) -> None:
    try:
        state = telemetry.sessions.get(session)
        if state is not None:
            state.observe(event, time.time_ns())
    except Exception as exc:
        report("RealtimeSession.on_event", exc)


async def wrap_handle_tool_call(
    telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``RealtimeSession._handle_tool_call``: a function call, a handoff if it builds new settings."""
    state = telemetry.sessions.get(instance)
    call = None
    if state is not None:
        try:
            call = state.tool_call(instance, args[0] if args else kwargs.get("event"))
        except Exception as exc:
            report("RealtimeSession._handle_tool_call", exc)
    if call is None:
        return await wrapped(*args, **kwargs)
    agent = instance._current_agent
    token = _realtime.CALL.set(call)
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as error:
        try:
            state.failed(call, error, agent)
        except Exception as exc:
            report("RealtimeSession._handle_tool_call", exc)
        raise
    finally:
        _realtime.CALL.reset(token)


async def wrap_settings(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``RealtimeSession._get_updated_model_settings_from_agent``: the new agent's settings."""
    call = _realtime.CALL.get()
    if call is None:  # the session's first agent, not a handoff
        return await wrapped(*args, **kwargs)
    try:
        call.state.settings_started(call, kwargs.get("agent"))
    except Exception as exc:
        report("realtime settings", exc)
    settings = await wrapped(*args, **kwargs)
    call.settings_end_ns = time.time_ns()
    return settings


async def wrap_session_close(
    telemetry: AgentsTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """``RealtimeSession.close``: handoffs still awaiting the new agent's output end here."""
    state = telemetry.sessions.pop(instance, None)
    if state is not None:
        try:
            _realtime.refresh_watched(telemetry)
            state.close()
        except Exception as exc:
            report("RealtimeSession.close", exc)
    return await wrapped(*args, **kwargs)
