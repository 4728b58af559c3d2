"""OpenTelemetry tracing of LangGraph handoffs: swarm, supervisor and the app's own ``Command`` tools.

Usage::

    from otel_handoff.langgraph import LangGraphHandoffInstrumentor

    LangGraphHandoffInstrumentor().instrument()

Every tool result ``Command(goto=<agent>, graph=Command.PARENT)`` (langgraph-swarm's and
langgraph-supervisor's handoff tools, and the app's own; each ``Send`` of several one handoff) and
every supervisor worker's hand-back becomes one ``agent_handoff`` span, from the decision to the
new agent's first output, with the phases ``handler`` (the tool), ``context_update`` (the
``ParentCommand`` bubbling up and the parent's state merge and step), ``start`` (the new agent's
node until its model call) and ``first_output``. LangGraph's ``ParentCommand`` is its mechanism,
never an error. Spans carry node and tool names and ids only: never the ``Command``'s update,
messages or tool arguments.

LangGraph has no OpenTelemetry of its own; we observe through LangChain's callbacks, added the
way LangSmith adds its tracer (``register_configure_hook``): one handler of ours joins each run's
callback manager, and leaves what the app's own callbacks receive unchanged.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection
from contextvars import ContextVar
from typing import Any

from ..core import schema as sc
from ..core.instrumentor import HandoffInstrumentor
from .package import NEWEST_TESTED, TESTED, _instruments

__all__ = ["LangGraphHandoffInstrumentor"]


def feature_problems() -> list[str]:
    """What this release lacks of what we rely on (checked once, at ``instrument()``)."""
    problems = []
    from langchain_core.tracers import context as tracer_context
    from langgraph.types import Command, Send

    if not callable(getattr(tracer_context, "register_configure_hook", None)) or not isinstance(
        getattr(tracer_context, "_configure_hooks", None), list
    ):
        problems.append("langchain_core.tracers.context.register_configure_hook")
    if not isinstance(getattr(Command, "PARENT", None), str):
        problems.append("langgraph.types.Command.PARENT")
    if not hasattr(Send, "node"):
        problems.append("langgraph.types.Send.node")
    return problems


class LangGraphHandoffInstrumentor(HandoffInstrumentor):
    """Traces LangGraph handoffs (langgraph 1.1.5 and later), sync and async."""

    _handler: Any = None
    _hook: tuple[Any, ...] | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    @classmethod
    def _in_place(cls) -> bool:
        return cls._hook is not None

    def _instrument(self, **kwargs: Any) -> None:
        if importlib.util.find_spec("langgraph") is None:
            return  # not installed: nothing to trace
        from importlib.metadata import version

        installed = version("langgraph")
        what = "its handoffs are"
        if self.refused(feature_problems, release="langgraph", version=installed, what=what, tested=TESTED):
            return
        from langchain_core.tracers import context as tracer_context
        from langgraph.types import Command, Send

        from ._handler import GraphTelemetry, HandoffCallbackHandler

        tracer, metrics = self.telemetry_parts(__name__, kwargs)
        telemetry = GraphTelemetry(
            tracer,
            metrics,
            self.static_attributes(sc.FRAMEWORK_LANGGRAPH, installed),
            parent_marker=Command.PARENT,
            command_type=Command,
            send_type=Send,
        )
        handler = HandoffCallbackHandler(telemetry)
        # a variable whose value, in every context and thread, is our handler: LangChain adds it
        # (inheritable) to every callback manager it configures, as it adds LangSmith's tracer
        variable: ContextVar[Any] = ContextVar("otel_handoff_langgraph", default=handler)
        before = len(tracer_context._configure_hooks)
        tracer_context.register_configure_hook(variable, True)
        cls = type(self)
        cls._handler = handler
        cls._hook = tracer_context._configure_hooks[before]
        self.note_if_untested(
            release="langgraph", version=installed, tested=TESTED, newest_tested=NEWEST_TESTED
        )

    def _uninstrument(self, **kwargs: Any) -> None:
        cls = type(self)
        if cls._hook is not None:
            from langchain_core.tracers import context as tracer_context

            hooks = tracer_context._configure_hooks
            if cls._hook in hooks:
                hooks.remove(cls._hook)  # LangChain has no public way to take a hook back
        if cls._handler is not None:
            cls._handler.telemetry.enabled = False
        cls._handler = None
        cls._hook = None
