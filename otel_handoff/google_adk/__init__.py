"""OpenTelemetry tracing of Google ADK transfers (``transfer_to_agent``): text runs and live sessions.

Usage::

    from otel_handoff.google_adk import GoogleADKHandoffInstrumentor

    GoogleADKHandoffInstrumentor().instrument()

Every transfer through ``EventActions.transfer_to_agent`` (the ``transfer_to_agent`` tool, any
other tool or event setting it) becomes one ``agent_handoff`` span with a child per phase:

- text runs (``Runner.run_async``, ``Runner.run``): from the old agent's model response asking for
  it to the new agent's first model response; ``tool``, ``delivery`` (the time the app's own loop
  held the two events ADK waits on), ``setup``, ``first_output``;
- live sessions (``Runner.run_live``): until the new agent's first audio reaches the app, the
  silence the caller hears; ``tool``, ``transfer_delay`` (ADK's fixed sleep), ``close``,
  ``setup``, ``connect``, ``send_history``, ``first_audio``.

With ADK's own tracing on (it uses the global tracer provider) the span sits under the
transferring agent's ``invoke_agent`` span. ``AgentTool``, workflow agents and ``escalate`` are
not handoffs. Spans carry agent and tool names and ids only: never the transfer reason (model
text), instructions, contents or tool arguments.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..core import a2a, crossing
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from . import package

__all__ = ["GoogleADKHandoffInstrumentor"]

_RUNNERS = "google.adk.runners"
_PLUGINS = "google.adk.plugins.plugin_manager"
# where the release keeps its live transfer delay: 2.x after the live flow moved, then before
_TRANSFER_DELAY_AT = ("google.adk.live._flow_utils", "google.adk.flows.llm_flows.base_llm_flow")


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    import functools

    from . import _wrappers as w

    with_telemetry = functools.partial
    return [
        (_RUNNERS, "Runner.run_async", with_telemetry(w.wrap_run_async, telemetry)),
        (_RUNNERS, "Runner.run_live", with_telemetry(w.wrap_run_live, telemetry)),
        (_PLUGINS, "PluginManager.run_before_agent_callback", with_telemetry(w.wrap_before_agent, telemetry)),
        (_PLUGINS, "PluginManager.run_before_tool_callback", with_telemetry(w.wrap_before_tool, telemetry)),
        (_PLUGINS, "PluginManager.run_after_tool_callback", with_telemetry(w.wrap_after_tool, telemetry)),
        (_PLUGINS, "PluginManager.run_before_model_callback", with_telemetry(w.wrap_before_model, telemetry)),
        (_PLUGINS, "PluginManager.run_after_model_callback", with_telemetry(w.wrap_after_model, telemetry)),
    ]


def shape_problems() -> list[str]:
    """What the wrap points lack of the shape we rely on (checked once, at ``instrument()``)."""
    problems = []

    def has_parameters(func: Any, *names: str) -> bool:
        try:
            return set(names) <= set(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            return False

    from google.adk.agents.readonly_context import ReadonlyContext
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.base_llm_connection import BaseLlmConnection
    from google.adk.plugins.plugin_manager import PluginManager
    from google.adk.runners import Runner
    from google.adk.tools.tool_context import ToolContext

    for name in ("run_async", "run_live"):
        method = getattr(Runner, name, None)
        if not inspect.isasyncgenfunction(method) or not has_parameters(method, "user_id", "session_id"):
            problems.append(f"Runner.{name}(user_id, session_id) as an async generator")
    callbacks = {
        "run_before_agent_callback": ("agent", "callback_context"),
        "run_before_tool_callback": ("tool", "tool_context"),
        "run_after_tool_callback": ("tool", "tool_context"),
        "run_before_model_callback": ("callback_context",),
        "run_after_model_callback": ("callback_context",),
    }
    for name, parameters in callbacks.items():
        method = getattr(PluginManager, name, None)
        if not inspect.iscoroutinefunction(method) or not has_parameters(method, *parameters):
            problems.append(f"PluginManager.{name}({', '.join(parameters)})")
    for owner, names in (
        (ReadonlyContext, ("session", "agent_name", "invocation_id")),
        (ToolContext, ("function_call_id", "actions")),
    ):
        problems.extend(f"{owner.__name__}.{name}" for name in names if not hasattr(owner, name))
    if not callable(getattr(BaseLlm, "connect", None)):
        problems.append("BaseLlm.connect")
    problems.extend(
        f"BaseLlmConnection.{name}"
        for name in ("send_history", "close")
        if not inspect.iscoroutinefunction(getattr(BaseLlmConnection, name, None))
    )
    return problems


def transfer_delay() -> float | None:
    """The release's fixed delay before a live transfer (``DEFAULT_TRANSFER_AGENT_DELAY``)."""
    for module in _TRANSFER_DELAY_AT:
        try:
            value = getattr(importlib.import_module(module), "DEFAULT_TRANSFER_AGENT_DELAY", None)
        except ImportError:
            continue
        if isinstance(value, (int, float)):
            return float(value)
    return None


class GoogleADKHandoffInstrumentor(HandoffInstrumentor):
    """Traces Google ADK transfers (google-adk 1.39.1 and later), text runs and live sessions."""

    package = package
    release = "google-adk"
    untraced = "its transfers are"

    def missing(self) -> list[str]:
        return shape_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from ._transfer import AdkTelemetry

        return AdkTelemetry(*parts, transfer_delay=transfer_delay())

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def after_instrument(self, telemetry: Any) -> None:
        a2a.instrument()  # a transfer to a RemoteA2aAgent carries its trace context; a server extracts it

    def before_uninstrument(self, telemetry: Any) -> None:
        a2a.uninstrument()
        for run in telemetry.runs.values():  # a remote transfer's span is open from its start
            for transfer in run.transfers:
                if transfer.sending is not None:
                    crossing.abandon(transfer.sending.opened)
        telemetry.runs.clear()
