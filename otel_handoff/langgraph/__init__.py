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

LangGraph has no OpenTelemetry of its own, and LangChain's callbacks reach every node, tool and
token: we observe LangGraph's own path instead (``_wrappers``): its loop for top-level runs, tool
calls, node steps and model starts, each a counter test between handoffs, and langgraph-
supervisor's hand-back. No callback handler of ours is anywhere but in the new agent's first model
run, until its first token.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from opentelemetry.instrumentation.utils import unwrap
from wrapt import register_post_import_hook, wrap_function_wrapper

from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from . import package

__all__ = ["LangGraphHandoffInstrumentor"]


_LOOP = "langgraph.pregel._loop"
_RUNNER = "langgraph.pregel._runner"
_TOOLS = "langchain_core.tools"
_CALLBACKS = "langchain_core.callbacks.manager"
_MODEL_STARTS = ("on_chat_model_start", "on_llm_start")
_SUPERVISOR = "langgraph_supervisor.supervisor"
_HANDBACK = "create_handoff_back_messages"


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    from . import _wrappers as w

    return [
        (_LOOP, "SyncPregelLoop.__enter__", w.wrap_loop_enter(telemetry)),
        (_LOOP, "SyncPregelLoop.__exit__", w.wrap_loop_exit(telemetry)),
        (_LOOP, "AsyncPregelLoop.__aenter__", w.wrap_loop_aenter(telemetry)),
        (_LOOP, "AsyncPregelLoop.__aexit__", w.wrap_loop_aexit(telemetry)),
        (_LOOP, "SyncPregelLoop._checkpointer_put_after_previous", w.wrap_checkpoint_write(telemetry)),
        (_LOOP, "AsyncPregelLoop._checkpointer_put_after_previous", w.wrap_checkpoint_write(telemetry)),
        (_RUNNER, "run_with_retry", w.wrap_task(telemetry)),
        (_RUNNER, "arun_with_retry", w.wrap_task(telemetry)),
        (_TOOLS, "BaseTool.run", w.wrap_tool_run(telemetry)),
        (_TOOLS, "BaseTool.arun", w.wrap_tool_arun(telemetry)),
        *((_CALLBACKS, f"CallbackManager.{m}", w.wrap_model_start(telemetry)) for m in _MODEL_STARTS),
        *((_CALLBACKS, f"AsyncCallbackManager.{m}", w.wrap_model_astart(telemetry)) for m in _MODEL_STARTS),
    ]


def feature_problems() -> list[str]:
    """What this release lacks of what we rely on beside the wrap points (checked once, at
    ``instrument()``)."""
    problems = []
    from langgraph._internal import _constants
    from langgraph.errors import GraphBubbleUp  # noqa: F401  (read at instrument())
    from langgraph.types import Command, Send

    from ._wrappers import TASK_ID

    if getattr(_constants, "CONFIG_KEY_TASK_ID", None) != TASK_ID:
        problems.append(f"langgraph._internal._constants.CONFIG_KEY_TASK_ID == {TASK_ID!r}")
    if not isinstance(getattr(Command, "PARENT", None), str):
        problems.append("langgraph.types.Command.PARENT")
    if not hasattr(Send, "node"):
        problems.append("langgraph.types.Send.node")
    return problems


class LangGraphHandoffInstrumentor(HandoffInstrumentor):
    """Traces LangGraph handoffs (langgraph 1.1.5 and later), sync and async."""

    package = package
    release = "langgraph"
    untraced = "its handoffs are"
    _handback: Any = None  # the post-import hook's token while it waits for langgraph-supervisor

    def missing(self) -> list[str]:
        return feature_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from langgraph.errors import GraphBubbleUp
        from langgraph.types import Command, Send

        from ._handoffs import GraphTelemetry

        return GraphTelemetry(
            *parts,
            parent_marker=Command.PARENT,
            command_type=Command,
            send_type=Send,
            bubble_types=(GraphBubbleUp,),
        )

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def after_instrument(self, telemetry: Any) -> None:
        """langgraph-supervisor's hand-back, wrapped when the app imports it (if ever)."""
        if importlib.util.find_spec("langgraph_supervisor") is None:
            return
        cls = type(self)
        token = cls._handback = object()

        def on_import(module: Any) -> None:
            if cls._handback is not token:
                return  # uninstrumented meanwhile
            cls._handback = None
            if not callable(getattr(module, _HANDBACK, None)):
                logging.getLogger(__name__).info(
                    "otel-handoff: this langgraph-supervisor has no %s.%s; its workers' hand-backs "
                    "are not traced (its handoffs are).",
                    _SUPERVISOR,
                    _HANDBACK,
                )
                return
            from ._wrappers import wrap_handback

            wrap_function_wrapper(module, _HANDBACK, wrap_handback(telemetry))
            telemetry.handback_wrapped = module

        register_post_import_hook(on_import, _SUPERVISOR)

    def before_uninstrument(self, telemetry: Any) -> None:
        type(self)._handback = None
        if telemetry.handback_wrapped is not None:
            unwrap(telemetry.handback_wrapped, _HANDBACK)
