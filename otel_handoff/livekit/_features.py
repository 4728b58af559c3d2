"""Feature detection for livekit-agents, done once at ``instrument()`` time.

Releases 1.2 to 1.8 differ in what a handoff tracer can see; each difference is read
here from the installed code (signatures, attributes), never guessed from a version
number, so wrappers on the hot path only test plain booleans.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
from typing import Any

from ..core.shapes import code_names, code_of, holds_text, loads_in_sequence

_LOG = logging.getLogger(__name__)


# 2.0 renamed `AgentSession` to `LiveSession`; the old name is a module `__getattr__` alias that warns
SESSION_CLASSES = ("LiveSession", "AgentSession")


@dataclasses.dataclass(frozen=True)
class LiveKitFeatures:
    version: str
    # `_update_activity_task(old_task, agent)`: an earlier handoff can be awaited (queue wait)
    queue_wait: bool
    # `start/resume(reuse_resources=...)` and `_ReusableResources` (1.5.3+)
    reuse: bool
    # `_ReusableResources.turn_detector_stream` (1.6.1+)
    turn_detector_reuse: bool
    # `voice/tool_executor.py` (1.6.0+)
    tool_executor: bool
    # how `_detach_reusable_resources` decides (read from its code, it changed in 1.5.x/1.6.x)
    stt_reuse_needs_default_node: bool = True
    realtime_reuse_checks_turn_detection: bool = True
    # where that decision reads the new agent's history: "agent" (`activity.agent.chat_ctx`, 1.x) or
    # "activity" (`activity._chat_ctx`, 2.0: an agent's history is its activity's, and reading
    # `agent.chat_ctx` outside the agent's hooks raises); None when neither (refused: `missing`)
    realtime_reuse_history: str | None = "agent"
    # `RealtimeSession/RecognizeStream._report_connection_acquired` (acquire_time metrics)
    connection_metrics: bool = False
    # what a tool returning an Agent after `ctx.update()` gets: "rejected", "deferred" or None
    tool_handoff_after_update: str | None = None
    # `RunContext._make_update_output`: the returned agent is still seen (1.8.x)
    update_output_hook: bool = False
    # `_update_activity` starts LiveKit's own `update_agent` span, its drain/pause and start/resume
    # spans under it, through its tracer's `start_span` (1.8.2+): a handoff's parent of them
    update_agent_span: bool = False
    # `FunctionToolsExecutedEvent.cancel_agent_handoff()`: the app drops a tool's handoff
    cancel_handoff_hook: bool = False
    # the job a session runs in, or None: `get_job_context(required=False)` (1.5+), or
    # `get_job_context()` raising RuntimeError outside a job (earlier releases)
    job_context: Any = None
    # the session class's own name in `agent_session` (never read through the warning alias)
    session_class: str = "AgentSession"

    def conversation_id(self) -> str | None:
        """The room sid, which LiveKit 1.8 stamps as ``gen_ai.conversation.id`` on its own spans.

        None outside a job: never made up (no UUIDs, trace ids or hashes).
        """
        if self.job_context is None:
            return None
        job = self.job_context()
        sid = job.job.room.sid if job is not None else None
        return sid if isinstance(sid, str) and sid else None


def _has_param(func: Any, name: str) -> bool:
    try:
        return name in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _tool_handoff_after_update() -> str | None:
    """Does the tool executor reject or defer a handoff returned after `ctx.update()`?"""
    try:
        from livekit.agents.voice import tool_executor
    except ImportError:
        return None
    if "_deferred_agent_handoff" in code_names(tool_executor):
        return "deferred"
    if holds_text(tool_executor, "agent handoff after a progress update is not supported"):
        return "rejected"
    return None


def _has_update_output_hook() -> bool:
    try:
        from livekit.agents.voice.events import RunContext
    except ImportError:
        return False
    return hasattr(RunContext, "_make_update_output")


UPDATE_AGENT_SPAN = "update_agent"  # LiveKit's own span of a handoff (1.8.2+)


def _has_update_agent_span(session_module: Any, session_cls: type) -> bool:
    """Does `_update_activity` start LiveKit's `update_agent` span with the `start_span` of its
    module's tracer (the `_DynamicTracer` that `livekit.agents.telemetry` exports), a method that
    tracer object's own ``start_span`` can shadow while a handoff waits for it?"""
    try:
        from livekit.agents.telemetry import traces
    except ImportError:
        return False
    tracer_class = getattr(traces, "_DynamicTracer", None)
    tracer = getattr(session_module, "tracer", None)
    update = getattr(session_cls, "_update_activity", None)
    return (
        tracer_class is not None
        and isinstance(tracer, tracer_class)
        and "start_span" not in getattr(tracer, "__dict__", {"start_span": None})
        and holds_text(update, UPDATE_AGENT_SPAN)
        and "start_span" in code_names(update)
    )


def session_tracer() -> Any:
    """The tracer object whose ``start_span`` `_update_activity` calls (its module's ``tracer``)."""
    from livekit.agents.voice import agent_session

    return agent_session.tracer


def session_class_name(agent_session: Any) -> str:
    """The session class as its module defines it: `LiveSession` (2.0) or `AgentSession` (1.x)."""
    defined = vars(agent_session)
    return next((name for name in SESSION_CLASSES if name in defined), "AgentSession")


def _realtime_reuse_history(detach: Any) -> str | None:
    """Where `_detach_reusable_resources` reads the new agent's history for its realtime check."""
    if detach is None:  # before 1.5.3: no reuse, nothing to mirror
        return "agent"
    if loads_in_sequence(detach, "new_activity", "agent", "chat_ctx"):
        return "agent"
    if loads_in_sequence(detach, "new_activity", "_chat_ctx"):
        return "activity"
    return None


def missing(features: LiveKitFeatures) -> list[str]:
    """What this release does in a way the wrappers cannot mirror: then nothing is patched."""
    from livekit.agents.voice import agent_session

    problems = python_handoff_path(vars(agent_session)[features.session_class])
    if features.reuse and features.realtime_reuse_history is None:
        problems.append("the new agent's history as _detach_reusable_resources reads it")
    return problems


def python_handoff_path(session_cls: type) -> list[str]:
    """Does a handoff still go `update_agent` → `_update_activity_task` → `_update_activity` in
    Python? 2.0 ships a compiled core with a session of its own (`_core.AgentSession`, unused by
    2.0.0b1's `LiveSession`); a session that hands off there would pass by every wrapper."""
    calls = (("update_agent", "_update_activity_task"), ("_update_activity_task", "_update_activity"))
    return [
        f"{session_cls.__name__}.{caller} calling {callee}"
        for caller, callee in calls
        if callee not in code_names(getattr(session_cls, caller, None))
    ]


def _has_cancel_handoff_hook() -> bool:
    try:
        from livekit.agents.voice.events import FunctionToolsExecutedEvent
    except ImportError:
        return False
    return callable(getattr(FunctionToolsExecutedEvent, "cancel_agent_handoff", None))


def _job_context() -> Any:
    """A function giving the current job context or None, whichever way this release offers it."""
    try:
        from livekit.agents import get_job_context
    except ImportError:
        return None
    if _has_param(get_job_context, "required"):
        return functools.partial(get_job_context, required=False)

    def job_or_none() -> Any:
        try:
            return get_job_context()
        except RuntimeError:  # "no job context found": not in a job
            return None

    return job_or_none


def detect() -> LiveKitFeatures:
    """Read what the installed livekit-agents offers; log what is left out."""
    from livekit.agents import __version__
    from livekit.agents.voice import agent_activity, agent_session

    session_class = session_class_name(agent_session)
    session_cls = vars(agent_session)[session_class]
    activity_cls = agent_activity.AgentActivity
    reusable = getattr(agent_activity, "_ReusableResources", None)
    reusable_fields = (
        {f.name for f in dataclasses.fields(reusable)}
        if reusable is not None and dataclasses.is_dataclass(reusable)
        else set()
    )
    try:
        from livekit.agents.voice import tool_executor  # noqa: F401

        has_tool_executor = True
    except ImportError:
        has_tool_executor = False
    from livekit.agents import llm, stt

    # read from its code (not its source: an install may have none); before 1.5 it is not there
    detach = code_of(getattr(activity_cls, "_detach_reusable_resources", None))
    features = LiveKitFeatures(
        version=__version__,
        queue_wait=_has_param(session_cls._update_activity_task, "old_task"),
        reuse=_has_param(activity_cls.start, "reuse_resources") and "stt_pipeline" in reusable_fields,
        turn_detector_reuse="turn_detector_stream" in reusable_fields,
        tool_executor=has_tool_executor,
        stt_reuse_needs_default_node=detach is None or loads_in_sequence(detach, "Agent", "stt_node"),
        realtime_reuse_checks_turn_detection=detach is None
        or "_rt_turn_detection_enabled" in code_names(detach),
        realtime_reuse_history=_realtime_reuse_history(detach),
        connection_metrics=hasattr(llm.RealtimeSession, "_report_connection_acquired")
        and hasattr(stt.RecognizeStream, "_report_connection_acquired"),
        tool_handoff_after_update=_tool_handoff_after_update(),
        update_output_hook=_has_update_output_hook(),
        update_agent_span=_has_update_agent_span(agent_session, session_cls),
        cancel_handoff_hook=_has_cancel_handoff_hook(),
        job_context=_job_context(),
        session_class=session_class,
    )
    for flag, what in (
        ("queue_wait", "queue wait (no earlier-handoff await in _update_activity_task)"),
        ("reuse", "STT / realtime session reuse (needs livekit-agents 1.5.3+)"),
        ("turn_detector_reuse", "turn detector reuse (needs livekit-agents 1.6.1+)"),
        ("tool_executor", "tool executor tracing (needs livekit-agents 1.6.0+)"),
        ("connection_metrics", "reconnect spans (no acquire_time metrics in this release)"),
    ):
        if not getattr(features, flag):
            _LOG.debug("livekit-agents %s: %s left out", features.version, what)
    return features
