"""OpenTelemetry tracing of Pipecat handoffs: Pipecat Flows node transitions, and handoffs between
Pipecat's multi-agent workers.

Usage::

    from otel_handoff.pipecat import PipecatHandoffInstrumentor

    PipecatHandoffInstrumentor().instrument()

(``PipecatFlowsHandoffInstrumentor`` is the same class, by its first name.)

Every node transition of a ``FlowManager`` (``pipecat.flows``, pipecat-ai 1.5 and later) becomes
one ``agent_handoff`` span with a child per phase: the app's function handler, the wait for other
function calls, pre-actions, the RESET_WITH_SUMMARY model call, the context update, post-actions;
and an ``agent_handoff.first_speech`` span, linked to it, until the bot speaks in the new node.
The first node (``initialize()``) is not a handoff. Spans carry node, function and action names
only: never messages, function arguments or results, summaries or ``tts_say`` text.

Every worker handoff (``activate_worker(target, deactivate_self=True)``, ``pipecat.workers``, on an
``AsyncQueueBus`` or across processes on a ``RedisBus`` or ``PgmqBus``) becomes one ``agent_handoff``
span (``agent_handoff.framework`` ``pipecat-workers``): the tool's handler, the old worker's drain,
the bus crossing, the new worker's setup, the wait for the old audio, its first output
(:mod:`._workers`). Each part is instrumented on its own, all or nothing.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import sys
import time
import warnings
from typing import Any

from ..core import schema as sc
from ..core.attribution import AttributedWarnings, attributed_warn_helper
from ..core.faults import guard
from ..core.instrumentor import HandoffInstrumentor, Installed, TelemetryParts, WrapPoint
from ..core.spans import end_open_roots
from . import package

_MANAGER = "pipecat.flows.manager"
_TYPES = "pipecat.flows.types"
_OUTPUT = "pipecat.transports.base_output"

_SPEECH = "_bot_started_speaking"
_SPEECH_STOPPED = "_bot_stopped_speaking"

__all__ = ["PipecatFlowsHandoffInstrumentor", "PipecatHandoffInstrumentor"]


def _wrap_points(telemetry: Any) -> list[WrapPoint]:
    from . import _wrappers as w

    with_telemetry = functools.partial
    manager = importlib.import_module(_MANAGER)
    # Flows' deprecation helper (1.7+), so its warnings name the app's line, not ours
    helper = (
        [(_MANAGER, "warn_deprecated", attributed_warn_helper)] if hasattr(manager, "warn_deprecated") else []
    )
    # when the output transport starts and ends a run of the bot's speech (once a run, never per frame)
    sender = getattr(importlib.import_module(_OUTPUT).BaseOutputTransport, "MediaSender", None)
    speech = [
        (_OUTPUT, f"BaseOutputTransport.MediaSender.{name}", with_telemetry(wrapper, telemetry))
        for name, wrapper in ((_SPEECH, w.wrap_speech), (_SPEECH_STOPPED, w.wrap_speech_stopped))
        if callable(getattr(sender, _SPEECH, None)) and callable(getattr(sender, name, None))
    ]
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


class _Flows(HandoffInstrumentor):
    """Pipecat Flows node transitions (pipecat-ai 1.5.0 and later)."""

    release = "pipecat-ai"
    untraced = "Flows transitions are"
    tested, newest_tested = package.TESTED, package.NEWEST_TESTED

    def detect(self) -> Installed | None:
        if importlib.util.find_spec("pipecat.flows") is None:
            return None  # before 1.5.0: no Flows to trace
        return Installed(importlib.metadata.version(self.release))

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


_LLM_WORKER = "pipecat.workers.llm.llm_worker"
_BASE_WORKER = "pipecat.workers.base_worker"
_PIPELINE_WORKER = "pipecat.pipeline.worker"


def _worker_wrap_points(telemetry: Any) -> list[WrapPoint]:
    """Once per tool (at a worker's construction), request, handover, activation, bus stop and
    serializer: never a frame or a bus message's way through the bus."""
    from . import _workers as w

    with_telemetry = functools.partial
    return [
        (_LLM_WORKER, "LLMWorker._track_tool_call", with_telemetry(w.wrap_track_tool_call, telemetry)),
        (_LLM_WORKER, "LLMWorker.activate_worker", with_telemetry(w.wrap_request, telemetry)),
        (_BASE_WORKER, "BaseWorker.activate_worker", with_telemetry(w.wrap_send, telemetry)),
        # before 1.8 inherited from BaseWorker (no drain of its own): wrapped on PipelineWorker alone,
        # after BaseWorker's, so it wraps that wrapper
        (_PIPELINE_WORKER, "PipelineWorker.activate_worker", with_telemetry(w.wrap_handover, telemetry)),
        (_BASE_WORKER, "BaseWorker._handle_worker_activate", with_telemetry(w.wrap_receive, telemetry)),
        (_BASE_WORKER, "BaseWorker._maybe_activate", with_telemetry(w.wrap_maybe_activate, telemetry)),
        (
            "pipecat.bus.messages",
            "BusActivateWorkerMessage.__init__",
            with_telemetry(w.wrap_message_init, telemetry),
        ),
        ("pipecat.bus.bus", "WorkerBus.stop", with_telemetry(w.wrap_bus_stop, telemetry)),
        (
            "pipecat.bus.serializers.json",
            "JSONMessageSerializer.__init__",
            with_telemetry(w.wrap_serializer_init, telemetry),
        ),
    ]


class _Workers(HandoffInstrumentor):
    """Handoffs between ``pipecat.workers`` workers (in pipecat-ai from 1.3.0; traced from 1.5.0, the
    package's floor)."""

    release = "pipecat-ai"
    untraced = "worker handoffs are"
    tested, newest_tested = package.TESTED_WORKERS, package.NEWEST_TESTED

    def detect(self) -> Installed | None:
        if importlib.util.find_spec("pipecat.workers") is None:
            return None
        return Installed(importlib.metadata.version(self.release))

    @staticmethod
    def static_attributes(framework: str, version: str) -> dict[str, Any]:
        return HandoffInstrumentor.static_attributes(sc.FRAMEWORK_PIPECAT_WORKERS, version)

    def make_telemetry(self, parts: TelemetryParts, features: Installed) -> Any:
        from ._workers import WorkersTelemetry

        return WorkersTelemetry(*parts)

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        return _worker_wrap_points(telemetry)

    def before_uninstrument(self, telemetry: Any) -> None:
        from ._workers import bus_stopped

        for bus in list(telemetry.conversations.keys()):
            bus_stopped(telemetry, bus)
        end_open_roots(sc.FRAMEWORK_PIPECAT_WORKERS)


class PipecatHandoffInstrumentor(HandoffInstrumentor):
    """Traces Pipecat Flows node transitions (pipecat-ai 1.5.0 and later) and handoffs between
    Pipecat's multi-agent workers (1.3.0 and later)."""

    package = package
    parts = (_Flows, _Workers)


# its first name, from when it traced Flows alone: entry points and apps that import it still work
PipecatFlowsHandoffInstrumentor = PipecatHandoffInstrumentor
