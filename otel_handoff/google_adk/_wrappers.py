"""The wrappers: ADK call -> timestamps in a run's state -> one record per transfer.

ADK's public observation points are its ``PluginManager.run_*_callback`` methods, which it calls
whether or not the app registered a plugin: we wrap those (no plugin of ours in the app's list),
the ``Runner``'s two entry points, and, in live runs, the model's ``connect`` and its
connection's ``send_history`` and ``close`` (``BaseLlm``/``BaseLlmConnection`` methods). Each
passes ADK's arguments, return values, exceptions and cancellation through unchanged; a fault
of ours is reported once and the call goes on as if we were not there.
"""

from __future__ import annotations

import time
import weakref
from contextlib import aclosing
from typing import Any

import wrapt

from ..core import crossing
from ..core.faults import report
from ..core.instrumentor import wrap_where_defined
from ._transfer import LIVE_RUN, AdkTelemetry, Run

_time_ns = time.time_ns


def _session_key(kwargs: dict[str, Any]) -> str | None:
    session_id = kwargs.get("session_id")
    if session_id is None:  # run_live(session=...)
        session_id = getattr(kwargs.get("session"), "id", None)
    return session_id if isinstance(session_id, str) else None


def _start_run(telemetry: AdkTelemetry, runner: Any, kwargs: dict[str, Any], live: bool) -> Run | None:
    if not telemetry.enabled:
        return None
    try:
        session = _session_key(kwargs)
        if session is None:
            return None
        user = kwargs.get("user_id") or getattr(kwargs.get("session"), "user_id", None) or ""
        app = getattr(runner, "app_name", None) or ""
        conversation = telemetry.conversations.get((str(app), str(user), session), session, _time_ns())
        return Run(telemetry, conversation, live, getattr(runner, "agent", None))
    except Exception as exc:
        report("Runner.run_live" if live else "Runner.run_async", exc)
        return None


def wrap_run_async(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``Runner.run_async`` (``Runner.run`` comes through it): one text run's state."""
    events = wrapped(*args, **kwargs)
    run = _start_run(telemetry, instance, kwargs, live=False)
    return events if run is None else _observed(events, run, _session_key(kwargs))


def wrap_run_live(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``Runner.run_live``: one live session's state."""
    events = wrapped(*args, **kwargs)
    run = _start_run(telemetry, instance, kwargs, live=True)
    return events if run is None else _observed(events, run, _session_key(kwargs))


async def _observed(events: Any, run: Run, key: Any) -> Any:
    """The run's events as the app receives them: when each reaches it and when it asks for the
    next (ADK holds the agent meanwhile). Work per event: two clock reads, unless a transfer is
    in flight or the event carries one."""
    runs = run.telemetry.runs
    runs[key] = run
    error: BaseException | None = None
    try:
        async with aclosing(events):
            async for event in events:
                run.arrived_ns = _time_ns()
                yield event
                run.released_ns = _time_ns()
                try:
                    if run.transfers or event.actions.transfer_to_agent:
                        run.event_released(event, run.arrived_ns, run.released_ns)
                except Exception as exc:
                    report("ADK event", exc)
    except GeneratorExit:  # the app stopped iterating
        raise
    except BaseException as exc:
        error = exc
        raise
    finally:
        if runs.get(key) is run:
            del runs[key]
        try:
            run.finish(_time_ns(), error)
        except Exception as exc:
            report("ADK run end", exc)


def _run_of(telemetry: AdkTelemetry, context: Any) -> Run | None:
    """The run a callback belongs to, by its session (callback and tool contexts have one)."""
    runs = telemetry.runs
    if not runs:
        return None
    return runs.get(context.session.id)


# --- PluginManager.run_*_callback: ADK calls them with or without plugins -------------------------


def wrap_before_agent(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """An agent starts: its ``invoke_agent`` context, and the new agent of a transfer."""
    try:
        context = kwargs["callback_context"]
        run = _run_of(telemetry, context)
        if run is not None:
            run.invocation_id = context.invocation_id
            agent = kwargs["agent"]
            run.agent_started(agent.name, _time_ns(), agent)
            if run.live:
                LIVE_RUN.set(weakref.ref(run))  # this agent's live flow runs in this task
                _watch_live_model(telemetry, agent)
    except Exception as exc:
        report("before_agent", exc)
    return wrapped(*args, **kwargs)


def wrap_before_tool(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A tool call starts (whether it transfers is known only when it returns)."""
    try:
        context = kwargs["tool_context"]
        run = _run_of(telemetry, context)
        if run is not None:
            run.tool_started(context.function_call_id, _time_ns())
    except Exception as exc:
        report("before_tool", exc)
    return wrapped(*args, **kwargs)


def wrap_after_tool(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A tool call returned: a transfer when it set ``actions.transfer_to_agent``."""
    run = None
    try:
        context = kwargs["tool_context"]
        run = _run_of(telemetry, context)
        if run is not None and not context.actions.transfer_to_agent:
            run.tools.pop(context.function_call_id, None)
            run = None
    except Exception as exc:
        report("after_tool", exc)
        run = None
    if run is None:
        return wrapped(*args, **kwargs)
    return _after_transfer_tool(run, wrapped(*args, **kwargs), kwargs)


async def _after_transfer_tool(run: Run, callbacks: Any, kwargs: dict[str, Any]) -> Any:
    result = await callbacks  # the after_tool callbacks are part of the tool phase
    try:
        context = kwargs["tool_context"]
        run.tool_ended(
            getattr(kwargs.get("tool"), "name", None),
            context.function_call_id,
            context.agent_name,
            context.actions.transfer_to_agent,
            _time_ns(),
        )
    except Exception as exc:
        report("after_tool", exc)
    return result


def wrap_before_model(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A model call is about to start: for a transfer's new agent, once its callbacks are done;
    in a server answering an A2A request sent with a caller's context, the end of its set-up."""
    run = None
    try:
        if telemetry.enabled:
            crossing.serving_started(telemetry, _time_ns())
        context = kwargs["callback_context"]
        run = _run_of(telemetry, context)
        if run is not None and not (run.transfers and run.awaits_model_call(context.agent_name)):
            run = None
    except Exception as exc:
        report("before_model", exc)
        run = None
    if run is None:
        return wrapped(*args, **kwargs)
    return _new_agent_model_call(run, wrapped(*args, **kwargs), kwargs)


async def _new_agent_model_call(run: Run, callbacks: Any, kwargs: dict[str, Any]) -> Any:
    result = await callbacks
    try:
        run.model_call_starting(kwargs["callback_context"].agent_name, _time_ns())
    except Exception as exc:
        report("before_model", exc)
    return result


def wrap_after_model(telemetry: AdkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A model response: a whole one may ask for a transfer (its time is the transfer's start); a
    partial one (SSE streaming, per token) matters only as a new agent's first output."""
    try:
        if not telemetry.runs or (kwargs["llm_response"].partial and not telemetry.awaiting_output):
            return wrapped(*args, **kwargs)
        context = kwargs["callback_context"]
        run = _run_of(telemetry, context)
        if run is not None:
            run.model_responded(context.agent_name, _time_ns())
    except Exception as exc:
        report("after_model", exc)
    return wrapped(*args, **kwargs)


# --- live: the model's connection, wrapped where the app's model class defines it ----------------


def _live_run() -> Run | None:
    ref = LIVE_RUN.get()
    return None if ref is None else ref()


def _watch_live_model(telemetry: AdkTelemetry, agent: Any) -> None:
    """Wrap ``connect`` of the agent's model class, once per class."""
    model = getattr(agent, "canonical_model", None)
    if model is not None:
        wrap_where_defined(type(model), "connect", _make_connect_wrapper(telemetry), telemetry.lazily_wrapped)


def _make_connect_wrapper(telemetry: AdkTelemetry) -> Any:
    def make(original: Any) -> Any:
        def wrap_connect(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            manager = wrapped(*args, **kwargs)
            run = _live_run() if telemetry.enabled else None
            return manager if run is None else _ObservedConnect(manager, run)

        return wrap_connect

    return make


class _ObservedConnect(wrapt.ObjectProxy):  # type: ignore[misc]
    """``connect()``'s context manager: how long opening the connection takes."""

    def __init__(self, wrapped: Any, run: Run) -> None:
        super().__init__(wrapped)
        self._self_run = run

    async def __aenter__(self) -> Any:
        start = _time_ns()
        connection = await self.__wrapped__.__aenter__()
        end = _time_ns()
        run = self._self_run
        try:
            run.connecting(start, end)
            wrapped = run.telemetry.lazily_wrapped
            wrap_where_defined(type(connection), "close", _make_timed(run.telemetry, "closing"), wrapped)
            wrap_where_defined(
                type(connection), "send_history", _make_timed(run.telemetry, "history_sent"), wrapped
            )
        except Exception as exc:
            report("live connect", exc)
        return connection

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self.__wrapped__.__aexit__(*exc_info)


def _make_timed(telemetry: AdkTelemetry, what: str) -> Any:
    """A wrapper of a connection's coroutine method: its start and end, for the live run's state."""

    def make(original: Any) -> Any:
        async def timed(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            run = _live_run() if telemetry.enabled else None
            if run is None:
                return await wrapped(*args, **kwargs)
            start = _time_ns()
            result = await wrapped(*args, **kwargs)
            try:
                getattr(run, what)(start, _time_ns())
            except Exception as exc:
                report(f"live {what}", exc)
            return result

        return timed

    return make
