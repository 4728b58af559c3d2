"""OpenTelemetry tracing of LiveKit Agents handoffs.

Usage::

    from otel_handoff.livekit import LiveKitHandoffInstrumentor

    LiveKitHandoffInstrumentor().instrument()

Every handoff (a tool returning an Agent, ``session.update_agent()``, an AgentTask
starting or handing back) becomes one ``agent_handoff`` span with children for the queue
wait, lock waits, drain/pause, close, start/resume and the new agent's ``on_enter``, and for
LiveKit's steps between them (the tasks' waits for the loop, prepare, switch). Where
LiveKit spans the handoff itself (its ``update_agent``, 1.8.2+), ``agent_handoff`` is that span's
parent and the phases LiveKit's spans show are durations on it, not spans again.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from typing import Any

from ..core import schema as sc
from ..core.instrumentor import HandoffInstrumentor, TelemetryParts, WrapPoint
from . import _features, _wrappers, package

_SESSION_MODULE = "livekit.agents.voice.agent_session"
_ACTIVITY_MODULE = "livekit.agents.voice.agent_activity"
_GENERATION_MODULE = "livekit.agents.voice.generation"
_EVENTS_MODULE = "livekit.agents.voice.events"
_REALTIME_MODULE = "livekit.agents.llm.realtime"
_STT_MODULE = "livekit.agents.stt.stt"
_PHASE_METHODS = (
    ("drain", sc.DRAIN),
    ("pause", sc.PAUSE),
    ("aclose", sc.CLOSE),
    ("start", sc.START),
    ("resume", sc.RESUME),
)
_LIVEKIT_LOGGER = "livekit.agents"  # where the tool executor logs a refused handoff

__all__ = ["LiveKitHandoffInstrumentor"]


def _wrap_points(telemetry: _wrappers.LiveKitTelemetry) -> list[WrapPoint]:
    """(module, "Class.method", wrapper) for everything this release lets us patch."""
    features = telemetry.features

    def bound(wrapper: Any, *more: Any) -> Any:
        return functools.partial(wrapper, telemetry, *more)

    session = features.session_class  # LiveSession from 2.0
    points = [
        (_SESSION_MODULE, f"{session}.__init__", _wrappers.wrap_session_init),
        (_SESSION_MODULE, f"{session}.update_agent", bound(_wrappers.wrap_update_agent)),
        (_SESSION_MODULE, f"{session}._update_activity", bound(_wrappers.wrap_update_activity)),
        (_SESSION_MODULE, f"{session}._update_activity_task", _wrappers.wrap_update_activity_task),
        (_SESSION_MODULE, f"{session}._update_agent_state", bound(_wrappers.wrap_update_agent_state)),
        (_SESSION_MODULE, f"{session}._aclose_impl", bound(_wrappers.wrap_session_close)),
        (_ACTIVITY_MODULE, "AgentActivity.__init__", _wrappers.wrap_activity_init),
        *(
            (
                _ACTIVITY_MODULE,
                f"AgentActivity.{method}",
                functools.partial(_wrappers.run_phase, telemetry, phase),
            )
            for method, phase in _PHASE_METHODS
        ),
        (_ACTIVITY_MODULE, "AgentActivity._create_speech_task", _wrappers.wrap_create_speech_task),
        (_GENERATION_MODULE, "make_tool_output", bound(_wrappers.wrap_make_tool_output)),
    ]
    if features.reuse:
        points.append(
            (
                _ACTIVITY_MODULE,
                "AgentActivity._detach_reusable_resources",
                bound(_wrappers.wrap_detach_reusable_resources),
            )
        )
    if features.connection_metrics:
        acquired = "_report_connection_acquired"
        points += [
            (
                _REALTIME_MODULE,
                f"RealtimeSession.{acquired}",
                bound(_wrappers.wrap_connection_acquired, _itself),
            ),
            (_STT_MODULE, f"RecognizeStream.{acquired}", bound(_wrappers.wrap_connection_acquired, _its_stt)),
        ]
    if features.cancel_handoff_hook:
        points.append(
            (
                _EVENTS_MODULE,
                "FunctionToolsExecutedEvent.cancel_agent_handoff",
                bound(_wrappers.wrap_cancel_agent_handoff),
            )
        )
    if features.tool_handoff_after_update is not None and features.update_output_hook:
        points.append(
            (_EVENTS_MODULE, "RunContext._make_update_output", bound(_wrappers.wrap_make_update_output))
        )
    return points


def _itself(realtime_session: Any) -> Any:
    return realtime_session


def _its_stt(stream: Any) -> Any:
    return stream._stt  # a handoff watches the STT, which opens the streams


class LiveKitHandoffInstrumentor(HandoffInstrumentor):
    """Traces LiveKit Agents handoffs (livekit-agents 1.2.18 and later, 2.0 pre-releases)."""

    package = package
    release = "livekit-agents"
    untraced = "handoffs are"
    _rejection_log: logging.Filter | None = None

    @property
    def newest_tested(self) -> str:
        """A pre-release the matrix passes is tested; a 1.8.x after 1.8.9 is still newer."""
        installed = importlib.metadata.version(self.release)
        return installed if installed in package.PRERELEASES_TESTED else package.NEWEST_TESTED

    def detect(self) -> _features.LiveKitFeatures:
        return _features.detect()

    def missing(self) -> list[str]:
        return _features.missing(_features.detect())

    def make_telemetry(
        self, parts: TelemetryParts, features: _features.LiveKitFeatures
    ) -> _wrappers.LiveKitTelemetry:
        telemetry = _wrappers.LiveKitTelemetry(*parts, features=features)
        if features.update_agent_span:  # not a wrap point: only while a handoff waits for its span
            telemetry.update_agent_hook = _wrappers.UpdateAgentSpanHook(_features.session_tracer())
        return telemetry

    def wrap_points(self, telemetry: _wrappers.LiveKitTelemetry) -> list[WrapPoint]:
        return _wrap_points(telemetry)

    def after_instrument(self, telemetry: _wrappers.LiveKitTelemetry) -> None:
        if telemetry.features.tool_handoff_after_update == "rejected":
            self._rejection_log = _wrappers.RejectedHandoffLog(telemetry)
            logging.getLogger(_LIVEKIT_LOGGER).addFilter(self._rejection_log)

    def before_uninstrument(self, telemetry: _wrappers.LiveKitTelemetry) -> None:
        if telemetry.update_agent_hook is not None:
            telemetry.update_agent_hook.close()
        if self._rejection_log is not None:
            logging.getLogger(_LIVEKIT_LOGGER).removeFilter(self._rejection_log)
            self._rejection_log = None
