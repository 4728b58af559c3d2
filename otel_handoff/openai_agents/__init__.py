"""OpenTelemetry tracing of OpenAI Agents SDK handoffs: text runs and realtime (voice) sessions.

Usage::

    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

    OpenAIAgentsHandoffInstrumentor().instrument()

Every handoff becomes one ``agent_handoff`` span with a child per phase:

- text runs (``Runner.run``, ``run_sync``, ``run_streamed``): from the end of the old agent's model
  call that asked for the handoff until the new agent's first output; ``on_handoff``, ``hooks``,
  ``input_filter``, ``setup`` (tools, instructions, handoffs), ``first_output``;
- realtime sessions (``agents.realtime``): from the handoff's function call until the new agent's
  first audio or text delta; ``on_handoff``, ``settings``, ``session_update`` (until the server's
  ``session.updated``), ``response_drain`` (until the old response is done), ``first_audio``.

Nothing goes through the SDK's trace processors, so an instrumentation that replaces them
(openinference's default) leaves ours alone. Spans carry agent and tool names and ids only: never
instructions, messages, handoff arguments, tool outputs, audio or transcripts.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

from ..core.faults import guard
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from . import package

__all__ = ["OpenAIAgentsHandoffInstrumentor"]

_RUN = "agents.run"
_TURN_RESOLUTION = "agents.run_internal.turn_resolution"
_RUN_LOOP = "agents.run_internal.run_loop"
_SESSION = "agents.realtime.session"


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    from . import _wrappers as w

    with_telemetry = functools.partial
    return [
        (_RUN, "AgentRunner.run", with_telemetry(w.wrap_run, telemetry)),
        (_RUN, "AgentRunner.run_streamed", with_telemetry(w.wrap_run_streamed, telemetry)),
        (_TURN_RESOLUTION, "execute_handoffs", with_telemetry(w.wrap_execute_handoffs, telemetry)),
        (_RUN_LOOP, "model_run_context", w.wrap_model_run_context),
        (_RUN_LOOP, "model_run_context_stream", w.wrap_model_run_context_stream),
        (_SESSION, "RealtimeSession.__init__", with_telemetry(w.wrap_session_init, telemetry)),
        (_SESSION, "RealtimeSession.on_event", with_telemetry(w.wrap_on_event, telemetry)),
        (_SESSION, "RealtimeSession._handle_tool_call", with_telemetry(w.wrap_handle_tool_call, telemetry)),
        (_SESSION, "RealtimeSession._get_updated_model_settings_from_agent", w.wrap_settings),
        (_SESSION, "RealtimeSession.close", with_telemetry(w.wrap_session_close, telemetry)),
    ]


def shape_problems() -> list[str]:
    """What the private wrap points lack of the shape we rely on (checked once, at ``instrument()``).

    The private functions are wrapped where the SDK looks them up at call time, so a release that
    moved a call elsewhere would leave a wrapper that never runs: each must still be called by
    name from its module, with the arguments we read.
    """
    problems = []

    def called_by_name(module_name: str, name: str) -> bool:
        module = importlib.import_module(module_name)
        return any(
            name in getattr(getattr(value, "__code__", None), "co_names", ())
            for value in vars(module).values()
            if inspect.isfunction(value) and value.__module__ == module_name
        )

    def has_parameters(func: Any, *names: str) -> bool:
        try:
            return set(names) <= set(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            return False

    turn_resolution = importlib.import_module(_TURN_RESOLUTION)
    if not called_by_name(_TURN_RESOLUTION, "execute_handoffs") or not has_parameters(
        turn_resolution.execute_handoffs, "public_agent", "run_handoffs", "hooks", "run_config"
    ):
        problems.append(f"{_TURN_RESOLUTION}.execute_handoffs(public_agent, run_handoffs, hooks, run_config)")
    for name in ("model_run_context", "model_run_context_stream"):
        if not called_by_name(_RUN_LOOP, name):
            problems.append(f"{_RUN_LOOP} calling {name}")
    from dataclasses import fields

    from agents.handoffs import Handoff
    from agents.run_internal.run_steps import ToolRunHandoff

    handoff_fields = {f.name for f in fields(Handoff)}
    if not {
        "on_invoke_handoff",
        "input_filter",
        "nest_handoff_history",
    } <= handoff_fields or "handoff" not in {f.name for f in fields(ToolRunHandoff)}:
        problems.append("Handoff.on_invoke_handoff/input_filter/nest_handoff_history")
    from agents.realtime.session import RealtimeSession

    handle = RealtimeSession._handle_tool_call
    names = getattr(handle, "__code__", None)
    if names is None or not {"_get_updated_model_settings_from_agent", "on_invoke_handoff"} <= set(
        names.co_names
    ):
        problems.append("RealtimeSession._handle_tool_call building the new agent's settings")
    if not has_parameters(RealtimeSession._get_updated_model_settings_from_agent, "agent"):
        problems.append("RealtimeSession._get_updated_model_settings_from_agent(agent)")
    return problems


class OpenAIAgentsHandoffInstrumentor(HandoffInstrumentor):
    """Traces OpenAI Agents SDK handoffs (openai-agents 0.21.0 and later), text and realtime."""

    package = package
    release = "openai-agents"
    untraced = "its handoffs are"

    def missing(self) -> list[str]:
        return shape_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from agents.lifecycle import AgentHooksBase, RunHooksBase

        from ._text import AgentsTelemetry

        return AgentsTelemetry(*parts, default_hooks=(RunHooksBase.on_handoff, AgentHooksBase.on_handoff))

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def before_uninstrument(self, telemetry: Any) -> None:
        for state in list(telemetry.sessions.values()):
            guard("uninstrument()", state.close)
        telemetry.sessions.clear()
