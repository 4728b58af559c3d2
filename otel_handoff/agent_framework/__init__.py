"""OpenTelemetry tracing of Microsoft Agent Framework handoffs: ``HandoffBuilder`` workflows.

Usage::

    from otel_handoff.agent_framework import AgentFrameworkHandoffInstrumentor

    AgentFrameworkHandoffInstrumentor().instrument()

Every handoff a ``HandoffBuilder`` workflow takes (its ``handoff_sent`` event) becomes one
``agent_handoff`` span, from the ``handoff_to_<target>`` call to the target agent's first output
(its first streamed update, or its first model call's end), with the phases ``handler`` (the
orchestration's middleware, until the tool loop stops), ``context_update`` (the old agent's run
teardown, the conversation cleaned and broadcast, until ``handoff_sent``), ``dispatch`` (the
superstep boundary: the checkpoint when one is configured, the deliveries, until the target
starts), ``setup`` (until its model call) and ``first_output``. Under the framework's own
``workflow.run`` span when its instrumentation is on, else under the app's span. Spans carry
agent and tool names and the tool call's id: never messages, broadcasts, tool results or the
user's requests.

Nothing of ours is on the per-update path beyond one test of an integer (``_handoffs`` says where
each wrapper runs and how often).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..core import a2a
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from ..core.shapes import code_names
from . import package

__all__ = ["AgentFrameworkHandoffInstrumentor"]

# the handoff orchestration: its own package since agent-framework-orchestrations 1.0.0 (before,
# agent_framework._workflows._handoff in the agent-framework-core prereleases: not traced)
_HANDOFF = "agent_framework_orchestrations._handoff"
_WORKFLOW = "agent_framework._workflows._workflow"
_RUNNER_CONTEXT = "agent_framework._workflows._runner_context"
_CONTEXT = "agent_framework._workflows._workflow_context"
_CLIENTS = "agent_framework._clients"


def shape_problems() -> list[str]:
    """What the release lacks of what the wrappers read beside the wrap points (checked once, at
    ``instrument()``): the middleware's table of handoff tools, the stream's cleanup hook, the
    workflow's runner (its context, where checkpoints are written), the framework's span names
    (``Runner`` itself is not imported: deprecated, it warns when imported)."""
    handoff = importlib.import_module(_HANDOFF)
    from agent_framework import ResponseStream
    from agent_framework._workflows._workflow import Workflow
    from agent_framework.observability import OtelAttr

    problems = []
    middleware = getattr(handoff, "_AutoHandoffMiddleware", None)
    if middleware is None or "_handoff_functions" not in code_names(middleware.__init__):
        problems.append(f"{_HANDOFF}._AutoHandoffMiddleware._handoff_functions")
    if not hasattr(ResponseStream, "with_cleanup_hook"):
        problems.append("agent_framework.ResponseStream.with_cleanup_hook")
    if "_runner" not in code_names(Workflow.__init__):
        problems.append("agent_framework._workflows._workflow.Workflow._runner")
    if not hasattr(OtelAttr, "EXECUTOR_PROCESS_SPAN"):
        problems.append("agent_framework.observability.OtelAttr.EXECUTOR_PROCESS_SPAN")
    return problems


class AgentFrameworkHandoffInstrumentor(HandoffInstrumentor):
    """Traces Microsoft Agent Framework ``HandoffBuilder`` handoffs (agent-framework-core 1.9.0 with
    agent-framework-orchestrations 1.0.0 and later), run or streamed."""

    package = package
    release = "agent-framework-core"
    untraced = "its HandoffBuilder handoffs are"

    def missing(self) -> list[str]:
        return shape_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from agent_framework import observability
        from agent_framework.observability import OtelAttr

        from ._handoffs import WorkflowTelemetry

        return WorkflowTelemetry(
            *parts,
            executor_type=importlib.import_module(_HANDOFF).HandoffAgentExecutor,
            executor_span=OtelAttr.EXECUTOR_PROCESS_SPAN,
            # set by the framework's protocol adapters; absent from older releases
            conversation_id=getattr(observability, "_TELEMETRY_CONVERSATION_ID", None),
        )

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        from . import _handoffs as h

        return [
            (_WORKFLOW, "Workflow.run", h.wrap_run(telemetry)),
            (_RUNNER_CONTEXT, "InProcRunnerContext.create_checkpoint", h.wrap_checkpoint(telemetry)),
            (_HANDOFF, "_AutoHandoffMiddleware.process", h.wrap_middleware(telemetry)),
            (_HANDOFF, "HandoffAgentExecutor._run_agent_and_emit", h.wrap_agent_run(telemetry)),
            (_HANDOFF, "HandoffAgentExecutor._is_handoff_requested", h.wrap_is_handoff_requested(telemetry)),
            (_CLIENTS, "BaseChatClient.get_response", h.wrap_get_response(telemetry)),
            (_CONTEXT, "WorkflowContext.yield_output", h.wrap_yield_output(telemetry)),
        ]

    def after_instrument(self, telemetry: Any) -> None:
        a2a.instrument()  # its A2AAgent's requests carry trace context; a server it builds extracts it

    def before_uninstrument(self, telemetry: Any) -> None:
        a2a.uninstrument()
        telemetry.flows.clear()
        telemetry.executors.clear()
        telemetry.contexts.clear()
        telemetry.checkpoints.clear()
        telemetry.awaiting = 0
