"""OpenTelemetry tracing of LlamaIndex ``AgentWorkflow`` handoffs (the built-in ``handoff`` tool).

Usage::

    from otel_handoff.llama_index import LlamaIndexHandoffInstrumentor

    LlamaIndexHandoffInstrumentor().instrument()

Every ``handoff`` tool call that switches the workflow's agent becomes one ``agent_handoff`` span,
from the tool call to the new agent's first output, with the phases ``handler`` (the tool),
``context_update`` (tool results into memory, the switch, the old agent's finalize, the history
read), ``setup`` (until the new agent's model call starts) and ``first_output``. A target the tool
refuses is ``rejected`` (``unknown_agent``, ``transfer_not_allowed``), its span running to the
first output of the extra model call it costs. Spans carry agent names, the tool name and call id:
never the ``reason``, the handoff's output text, tool results, memory or state.

LlamaIndex has no OpenTelemetry of its own; its instrumentation dispatcher reaches every span and
event of every run. We wrap the workflow's own steps instead (``_handoffs``), and listen to the
LLM chat events only while a step awaits a handoff's first output.
"""

from __future__ import annotations

from typing import Any

from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from ..core.shapes import code_names, loads_in_sequence
from . import package

__all__ = ["LlamaIndexHandoffInstrumentor"]

_WORKFLOW = "llama_index.core.agent.workflow.multi_agent_workflow"
_CALLBACKS = "llama_index.core.llms.callbacks"  # the LLM chat events' dispatcher is named after it


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    from . import _handoffs as h

    return [
        (_WORKFLOW, "AgentWorkflow.run", h.wrap_run(telemetry)),
        (_WORKFLOW, "AgentWorkflow.parse_agent_output", h.wrap_parse_agent_output(telemetry)),
        (_WORKFLOW, "AgentWorkflow.call_tool", h.wrap_call_tool(telemetry)),
        (_WORKFLOW, "AgentWorkflow.aggregate_tool_results", h.wrap_aggregate(telemetry)),
        (_WORKFLOW, "AgentWorkflow.run_agent_step", h.wrap_run_agent_step(telemetry)),
    ]


def feature_problems() -> list[str]:
    """What this release lacks of what we rely on beside the wrap points (checked once, at
    ``instrument()``): the tool reading ``ctx.store``, the events' fields, the chat events."""
    from llama_index.core.agent.workflow import multi_agent_workflow as maw
    from llama_index.core.agent.workflow.workflow_events import AgentInput, AgentOutput, ToolCall
    from llama_index.core.instrumentation.events import llm
    from llama_index.core.memory import Memory  # noqa: F401  (read at make_telemetry())

    problems = []
    handoff = getattr(maw, "handoff", None)
    if handoff is None or not loads_in_sequence(handoff, "ctx", "store"):
        problems.append(f"{_WORKFLOW}.handoff reading ctx.store")
    for event, fields in (
        (ToolCall, ("tool_name", "tool_id", "tool_kwargs")),
        (AgentOutput, ("tool_calls", "current_agent_name")),
        (AgentInput, ("input", "current_agent_name")),
    ):
        problems += [f"{event.__name__}.{f}" for f in fields if f not in event.model_fields]
    from llama_index.core.workflow.handler import WorkflowHandler

    if not hasattr(WorkflowHandler, "add_done_callback") and "_result_task" not in code_names(
        WorkflowHandler.__init__
    ):
        problems.append("WorkflowHandler.add_done_callback or its _result_task")
    for name in ("LLMChatStartEvent", "LLMChatInProgressEvent", "LLMChatEndEvent"):
        if not hasattr(llm, name):
            problems.append(f"llama_index.core.instrumentation.events.llm.{name}")
    return problems


class LlamaIndexHandoffInstrumentor(HandoffInstrumentor):
    """Traces LlamaIndex ``AgentWorkflow`` handoffs (llama-index-core 0.12.45 and later)."""

    package = package
    release = "llama-index-core"
    untraced = "its AgentWorkflow handoffs are"

    def missing(self) -> list[str]:
        return feature_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from llama_index.core.instrumentation import get_dispatcher
        from llama_index.core.instrumentation.event_handlers import BaseEventHandler
        from llama_index.core.memory import Memory  # its session_id: the conversation

        from ._handoffs import AWAITED, WorkflowTelemetry, chat_event

        class HandoffListener(BaseEventHandler):
            """Ours on the LLM callbacks' dispatcher while a step awaits a handoff's first output."""

            @classmethod
            def class_name(cls) -> str:
                return "OtelHandoffListener"

            def handle(self, event: Any, **kwargs: Any) -> None:
                handoff = AWAITED.get()
                if handoff is not None:  # else another run's model call meanwhile
                    chat_event(handoff, type(event).__name__)

        return WorkflowTelemetry(
            *parts,
            memory_type=Memory,
            dispatcher=get_dispatcher(_CALLBACKS),
            listener=HandoffListener(),
        )

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def before_uninstrument(self, telemetry: Any) -> None:
        """Our listener off the dispatcher, whatever was awaiting."""
        dispatcher = telemetry.dispatcher
        with telemetry.lock:
            telemetry.listening = 0
            dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not telemetry.listener]
