"""OpenTelemetry tracing of Pipecat Flows node transitions.

Usage::

    from otel_handoff.pipecat import PipecatFlowsHandoffInstrumentor

    PipecatFlowsHandoffInstrumentor().instrument()

Every node transition of a ``FlowManager`` (``pipecat.flows``, pipecat-ai 1.5 and later) becomes
one ``agent_handoff`` span with a child per phase: the app's function handler, the wait for other
function calls, pre-actions, the RESET_WITH_SUMMARY model call, the context update, post-actions;
and an ``agent_handoff.first_speech`` span, linked to it, until the bot speaks in the new node.
The first node (``initialize()``) is not a handoff. Spans carry node, function and action names
only: never messages, function arguments or results, summaries or ``tts_say`` text.
"""

from __future__ import annotations

import functools
import importlib
import sys
import time
import warnings
from typing import Any

from ..core.attribution import AttributedWarnings, attributed_warn_helper
from ..core.faults import guard
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from . import package

_MANAGER = "pipecat.flows.manager"
_TYPES = "pipecat.flows.types"
_OUTPUT = "pipecat.transports.base_output"

_SPEECH = "_bot_started_speaking"

__all__ = ["PipecatFlowsHandoffInstrumentor"]


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    from . import _wrappers as w

    with_telemetry = functools.partial
    manager = importlib.import_module(_MANAGER)
    # Flows' deprecation helper (1.7+), so its warnings name the app's line, not ours
    helper = (
        [(_MANAGER, "warn_deprecated", attributed_warn_helper)] if hasattr(manager, "warn_deprecated") else []
    )
    # when the output transport starts a run of the bot's speech (once a run, never per frame)
    sender = getattr(importlib.import_module(_OUTPUT).BaseOutputTransport, "MediaSender", None)
    speech = (
        [(_OUTPUT, f"BaseOutputTransport.MediaSender.{_SPEECH}", with_telemetry(w.wrap_speech, telemetry))]
        if callable(getattr(sender, _SPEECH, None))
        else []
    )
    return [
        *helper,
        *speech,
        (_MANAGER, "FlowManager.__init__", with_telemetry(w.wrap_init, telemetry)),
        (
            _MANAGER,
            "FlowManager._create_transition_func",
            with_telemetry(w.wrap_create_transition_func, telemetry),
        ),
        (_MANAGER, "FlowManager._call_handler", with_telemetry(w.wrap_call_handler, telemetry)),
        (_TYPES, "FlowsDirectFunctionWrapper.invoke", with_telemetry(w.wrap_call_handler, telemetry)),
        (
            _MANAGER,
            "FlowManager._check_and_execute_transition",
            with_telemetry(w.wrap_check_and_execute, telemetry),
        ),
        (
            _MANAGER,
            "FlowManager.set_node_from_config",
            with_telemetry(w.wrap_set_node_from_config, telemetry),
        ),
        (_MANAGER, "FlowManager._set_node", with_telemetry(w.wrap_set_node, telemetry)),
        (_MANAGER, "FlowManager._execute_actions", with_telemetry(w.wrap_execute_actions, telemetry)),
        (_MANAGER, "FlowManager._update_llm_context", with_telemetry(w.wrap_update_llm_context, telemetry)),
        (
            _MANAGER,
            "FlowManager._create_conversation_summary",
            with_telemetry(w.wrap_create_summary, telemetry),
        ),
    ]


class PipecatFlowsHandoffInstrumentor(HandoffInstrumentor):
    """Traces Pipecat Flows node transitions (pipecat-ai 1.5.0 and later)."""

    package = package
    release = "pipecat-ai"
    untraced = "Flows transitions are"

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from ._observer import observers_join_running_pipelines, source_events_carry_frames
        from ._transition import FlowsTelemetry

        return FlowsTelemetry(
            *parts,
            observer_on_demand=observers_join_running_pipelines(),
            source_events=source_events_carry_frames(),
        )

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def after_instrument(self, telemetry: Any) -> None:
        manager = importlib.import_module(_MANAGER)
        if getattr(manager, "warnings", None) is warnings:  # Flows' plain warnings.warn calls
            setattr(manager, "warnings", AttributedWarnings())  # noqa: B010 (a module's global)

    def before_uninstrument(self, telemetry: Any) -> None:
        for state in list(telemetry.flows.values()):
            state.finish(time.time_ns())
            if state.watch is not None:
                guard("uninstrument()", state.watch.detach)  # observers and handlers off the workers
                state.watch = None
        manager = sys.modules.get(_MANAGER)
        if isinstance(getattr(manager, "warnings", None), AttributedWarnings):
            setattr(manager, "warnings", warnings)  # noqa: B010 (a module's global)
