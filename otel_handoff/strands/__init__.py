"""OpenTelemetry tracing of Strands Agents handoffs: a ``Swarm``'s ``handoff_to_agent`` tool.

Usage::

    from otel_handoff.strands import StrandsHandoffInstrumentor

    StrandsHandoffInstrumentor().instrument()

Every ``handoff_to_agent`` call the swarm takes becomes one ``agent_handoff`` span, from the tool
call in the old agent's model output to the new agent's first output (its first streamed text, or
the end of its first model call), with the phases ``handler`` (the tool), ``drain`` (the old
agent's turn after the tool: by default one more model call, its closing reply, counted in
``agent_handoff.drain.model_calls``), ``setup`` (the switch, the swarm's limits and hooks, the new
node's input, until its model call starts) and ``first_output``. Under Strands' own
``invoke_swarm`` span when its tracing is on, else under the span current when the app ran the
swarm. Spans carry agent and tool names and the tool call's id only: never the tool's message or
context, the shared context, the new node's input, the drain's text or the task.

Nothing of ours runs per streamed token: we observe six of the hook events Strands makes anyway, as
it makes them (no hook provider is added to any registry), and two steps of its stream handling
that run once per content block and per model call (``_handoffs`` says which and why).
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any

from ..core import a2a
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from . import package

__all__ = ["StrandsHandoffInstrumentor"]

_STREAMING = "strands.event_loop.streaming"


def shape_problems() -> list[str]:
    """What the release lacks of what the proxy relies on (checked once, at ``instrument()``): the
    swarm's event stream, and the switch made once the old node's turn ends (``handoff_node``,
    strands-agents 1.17; before, the tool switched agents in the middle of the turn)."""
    import dataclasses

    from strands.multiagent.swarm import Swarm, SwarmState
    from strands.types import _events

    problems = []
    if not inspect.isasyncgenfunction(getattr(Swarm, "stream_async", None)):
        problems.append("Swarm.stream_async as an async generator")
    from ._handoffs import HANDLERS, event_classes

    found = event_classes(_event_modules())
    problems.extend(f"strands.hooks.{name}" for name in HANDLERS if name not in found)
    fields = (
        {f.name for f in dataclasses.fields(SwarmState)} if dataclasses.is_dataclass(SwarmState) else set()
    )
    problems.extend(f"SwarmState.{name}" for name in ("handoff_node", "node_history") if name not in fields)
    problems.extend(
        f"strands.types._events.{name}"
        for name in ("MultiAgentHandoffEvent", "MultiAgentNodeStartEvent", "MultiAgentNodeStopEvent")
        if not hasattr(_events, name)
    )
    return problems


def swarm_interrupts() -> bool:
    """Whether the release's swarm nodes interrupt and the app resumes them (strands-agents 1.20
    and later; before, an interrupt in a node raised). Read once, at ``instrument()``."""
    from strands.multiagent.base import Status
    from strands.types import _events

    return hasattr(_events, "MultiAgentNodeInterruptEvent") and hasattr(Status, "INTERRUPTED")


def _event_modules() -> list[Any]:
    """Where the release defines the hook events: the multi-agent ones were experimental up to 1.2x."""
    import importlib

    from ._handoffs import HANDLERS

    modules = [importlib.import_module("strands.hooks")]
    if not all(hasattr(modules[0], name) for name in HANDLERS):
        # only then: importing the experimental module warns (deprecated) where strands.hooks has them
        with contextlib.suppress(ImportError):
            modules.append(importlib.import_module("strands.experimental.hooks.multiagent"))
    return modules


class StrandsHandoffInstrumentor(HandoffInstrumentor):
    """Traces Strands Agents swarm handoffs (strands-agents 1.17.0 and later), run or streamed."""

    package = package
    release = "strands-agents"
    untraced = "its swarm handoffs are"

    def missing(self) -> list[str]:
        return shape_problems()

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from strands.multiagent.swarm import Swarm

        from . import _handoffs as h

        return h.SwarmTelemetry(*parts, swarm_type=Swarm, interrupts=swarm_interrupts())

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        from . import _handoffs as h

        events = h.event_classes(_event_modules())
        return [
            *(
                (cls.__module__, f"{name}.__init__", h.wrap_event(telemetry, name))
                for name, cls in events.items()
            ),
            (_STREAMING, "handle_content_block_start", h.wrap_block_start(telemetry)),
            (_STREAMING, "handle_message_start", h.wrap_message_start(telemetry)),
        ]

    def after_instrument(self, telemetry: Any) -> None:
        a2a.instrument()  # its A2AAgent's requests carry trace context; a server it builds extracts it

    def before_uninstrument(self, telemetry: Any) -> None:
        a2a.uninstrument()
        telemetry.runs.clear()
        telemetry.starting.clear()
        telemetry.agents.clear()
        telemetry.tool_starts.clear()
