"""Trace context over A2A (a2a-sdk), for any framework's client and server.

Neither a2a-sdk nor the frameworks built on it carry W3C trace context: a remote agent's spans
start traces of their own. Two wrap points join them, whatever framework sends or serves:

- the client, ``BaseClient.send_message`` (every transport, streaming or not): the request's
  headers (``ClientCallContext.service_parameters``, a copy; the app's own object is left as it
  is, and a header the app set wins) get the context :func:`.crossing.outgoing` names, the open
  handoff the sending task noted, else the current span (a delegation joins the trace too);
- the server, the ``execute`` of the agent executor a request handler is built with (ADK's
  ``A2aAgentExecutor``, Strands', Agent Framework's, the app's own), wrapped on the class that
  defines it when the handler is made: within it the request headers' context is current, so the
  agent's spans (the framework's and ours) go under the caller's, and the framework's package
  ends the ``remote_setup`` span there at its agent's first model call (:func:`.crossing.serving_started`).

Framework packages call :func:`instrument` and :func:`uninstrument` (counted: the last one out
unwraps). Nothing here is on a per-event path: once per request on each side.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from opentelemetry.instrumentation.utils import unwrap
from wrapt import register_post_import_hook, wrap_function_wrapper

from .crossing import inject, outgoing, received
from .faults import report
from .instrumentor import unwrap_each, wrap_where_defined

_CLIENT = ("a2a.client.base_client", "BaseClient", "send_message")
# the request handlers an executor is given to: a2a-sdk 1.x's (v2, and its legacy one), 0.3's
_HANDLERS = (
    ("a2a.server.request_handlers.default_request_handler_v2", "DefaultRequestHandlerV2"),
    ("a2a.server.request_handlers.default_request_handler", "LegacyRequestHandler"),
    ("a2a.server.request_handlers.default_request_handler", "DefaultRequestHandler"),
)


class _State:
    users = 0  # instrumentors that asked for it
    token: object | None = None  # the current instrumentation's: a stale import hook does nothing
    wrapped: ClassVar[list[tuple[Any, str]]] = []  # (class, method) wrapped where a2a-sdk defines it
    executors: ClassVar[list[tuple[type, str]]] = []  # executor classes' execute, wrapped on first sight
    service_parameters = True  # a2a-sdk 1.x's call context (headers in service_parameters), not 0.3's


def instrument() -> None:
    """Carry trace context over A2A once a2a-sdk is imported (now, or when the app imports it)."""
    _State.users += 1
    if _State.users > 1:
        return
    token = _State.token = object()

    def on_import(module: Any) -> None:
        if _State.token is token:
            try:
                _wrap(module)
            except Exception as exc:  # the app's import goes on
                report("instrumenting a2a-sdk", exc)

    register_post_import_hook(on_import, _CLIENT[0])
    for module in {module for module, _ in _HANDLERS}:
        register_post_import_hook(on_import, module)


def uninstrument() -> None:
    """The last user gone: every wrapper of ours taken off a2a-sdk and the executors."""
    _State.users = max(0, _State.users - 1)
    if _State.users:
        return
    _State.token = None
    wrapped, _State.wrapped = _State.wrapped, []
    for owner, name in wrapped:
        unwrap(owner, name)
    unwrap_each(_State.executors)


def _wrap(module: Any) -> None:
    """Wrap what ``module`` (one of a2a-sdk's, just imported) holds of ours, once."""
    targets = []
    if module.__name__ == _CLIENT[0]:
        from a2a.client.client import ClientCallContext

        _State.service_parameters = "service_parameters" in ClientCallContext.model_fields
        targets.append((_CLIENT[1], _CLIENT[2], _send_message))
    targets += [(cls, "__init__", _handler_init) for name, cls in _HANDLERS if name == module.__name__]
    for class_name, method, wrapper in targets:
        owner = getattr(module, class_name, None)
        if owner is None or method not in vars(owner) or (owner, method) in _State.wrapped:
            continue
        wrap_function_wrapper(owner, method, wrapper)
        _State.wrapped.append((owner, method))


# --- the client -------------------------------------------------------------------------------------


def _send_message(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``send_message(request, *, context=None)``: the request carries the sender's trace context."""
    try:
        carrier: dict[str, str] = {}
        inject(carrier, outgoing(time.time_ns()))
        if carrier:
            kwargs = {**kwargs, "context": _with_headers(kwargs.get("context"), carrier)}
    except Exception as exc:
        report("a2a send_message", exc)
    return wrapped(*args, **kwargs)


def _with_headers(context: Any, carrier: dict[str, str]) -> Any:
    """A copy of the app's ``ClientCallContext`` (or a new one) whose headers hold ``carrier``
    under the app's own: a2a-sdk 1.x sends ``service_parameters`` as headers, 0.3 sends
    ``state['http_kwargs']['headers']``."""
    from a2a.client.client import ClientCallContext

    if _State.service_parameters:
        own = (context.service_parameters if context is not None else None) or {}
        update = {"service_parameters": {**carrier, **own}}
    else:
        state = dict(context.state) if context is not None else {}
        http = dict(state.get("http_kwargs") or {})
        http["headers"] = {**carrier, **(http.get("headers") or {})}
        update = {"state": {**state, "http_kwargs": http}}
    if context is None:
        return ClientCallContext(**update)
    return context.model_copy(update=update)


# --- the server -------------------------------------------------------------------------------------


def _handler_init(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A request handler is made with its executor: that executor's class gets the wrapper."""
    result = wrapped(*args, **kwargs)
    try:
        executor = kwargs.get("agent_executor", args[0] if args else None)
        if executor is not None:
            wrap_where_defined(type(executor), "execute", _make_execute, _State.executors)
    except Exception as exc:
        report("a2a request handler", exc)
    return result


def _make_execute(original: Any) -> Any:
    async def execute(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        """``execute(context, event_queue)`` under the caller's trace context, if it sent one."""
        with received(_headers(kwargs.get("context", args[0] if args else None)), time.time_ns()):
            return await wrapped(*args, **kwargs)

    return execute


def _headers(request_context: Any) -> Mapping[str, Any]:
    """The request's headers, as a2a-sdk's server keeps them (``call_context.state['headers']``)."""
    try:
        state = getattr(getattr(request_context, "call_context", None), "state", None) or {}
        headers = state.get("headers")
        return headers if isinstance(headers, Mapping) else {}
    except Exception as exc:
        report("a2a execute", exc)
        return {}
