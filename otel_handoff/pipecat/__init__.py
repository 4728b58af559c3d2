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
import importlib.util
import sys
import time
import warnings
from collections.abc import Collection
from typing import Any

from ..core import schema as sc
from ..core.attribution import AttributedWarnings, attributed_warn_helper
from ..core.faults import guard
from ..core.instrumentor import HandoffInstrumentor
from .package import NEWEST_TESTED, TESTED, _instruments

_MANAGER = "pipecat.flows.manager"
_TYPES = "pipecat.flows.types"

__all__ = ["PipecatFlowsHandoffInstrumentor"]


def _wrap_points(telemetry: Any) -> list[tuple[str, str, Any]]:
    from . import _wrappers as w

    with_telemetry = functools.partial
    manager = importlib.import_module(_MANAGER)
    # Flows' deprecation helper (1.7+), so its warnings name the app's line, not ours
    helper = (
        [(_MANAGER, "warn_deprecated", attributed_warn_helper)] if hasattr(manager, "warn_deprecated") else []
    )
    return [
        *helper,
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

    _telemetry: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        if importlib.util.find_spec("pipecat") is None or importlib.util.find_spec("pipecat.flows") is None:
            return  # not installed, or a pipecat-ai before Flows moved in: nothing to trace
        from importlib.metadata import version

        from ._observer import observers_join_running_pipelines, source_events_carry_frames
        from ._transition import FlowsTelemetry

        installed = version("pipecat-ai")
        tracer, metrics = self.telemetry_parts(__name__, kwargs)
        telemetry = FlowsTelemetry(
            tracer,
            metrics,
            self.static_attributes(sc.FRAMEWORK_PIPECAT, installed),
            observer_on_demand=observers_join_running_pipelines(),
            source_events=source_events_carry_frames(),
        )
        if self.wrap_all(
            _wrap_points(telemetry),
            release="pipecat-ai",
            version=installed,
            tested=TESTED,
            newest_tested=NEWEST_TESTED,
            what="Flows transitions are",
        ):
            type(self)._telemetry = telemetry
            manager = importlib.import_module(_MANAGER)
            if getattr(manager, "warnings", None) is warnings:  # Flows' plain warnings.warn calls
                setattr(manager, "warnings", AttributedWarnings())  # noqa: B010 (a module's global)

    def _uninstrument(self, **kwargs: Any) -> None:
        cls = type(self)
        telemetry = cls._telemetry
        if telemetry is not None:
            telemetry.enabled = False  # an observer not yet removed passes everything by
            for state in list(telemetry.flows.values()):
                state.finish(time.time_ns())
                if state.watch is not None:
                    guard("uninstrument()", state.watch.detach)  # observers and handlers off the workers
                    state.watch = None
        self.unwrap_all()
        manager = sys.modules.get(_MANAGER)
        if isinstance(getattr(manager, "warnings", None), AttributedWarnings):
            setattr(manager, "warnings", warnings)  # noqa: B010 (a module's global)
        cls._telemetry = None
