"""Realtime (voice) sessions of the OpenAI Agents SDK: a handoff from the function call to new audio.

The caller hears silence from the moment the model's ``transfer_to_…`` function call arrives
until the new agent's first audio (or text) delta. In between, the session runs the app's
``on_handoff``, builds the new agent's settings, sends ``session.update`` (fire-and-forget: the
server's ``session.updated`` comes whenever it comes) and the tool output; the new agent's
``response.create`` then waits until the old response is done. Each session is a
:class:`SessionState` that watches the model's events as the session receives them; a handoff is
emitted as one record when the new agent's first delta arrives, or when the session closes first.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.record import PhaseRecord
from ._text import AgentsTelemetry, current_parent, emit_tool_handoff

# the tool call this code runs inside (each runs in a task of its own)
CALL: ContextVar[ToolCall | None] = ContextVar("otel_handoff_openai_agents_call", default=None)

_OUTPUT_DELTAS = frozenset(("audio", "transcript_delta", "output_text_delta"))
# the model events a session always needs (a function call's arrival, the response running) ...
ALWAYS_WATCHED = frozenset(("function_call", "turn_started", "turn_ended"))
# ... and while a handoff awaits the new agent's output (or the server's session id is unknown)
AWAITING_WATCHED = ALWAYS_WATCHED | _OUTPUT_DELTAS | {"raw_server_event", "audio_interrupted"}
UNNAMED_WATCHED = ALWAYS_WATCHED | {"raw_server_event"}


def refresh_watched(telemetry: AgentsTelemetry) -> None:
    """The event types ``on_event`` must look at now, over every open session: an audio delta
    costs one set test while no handoff awaits output."""
    sessions = list(telemetry.sessions.values())
    if any(state.awaiting for state in sessions):
        telemetry.watched = AWAITING_WATCHED
    elif any(state.server_session_id is None for state in sessions):
        telemetry.watched = UNNAMED_WATCHED
    else:
        telemetry.watched = ALWAYS_WATCHED


def group_id(session: Any) -> str | None:
    """The group id the app gave the session's tracing config (run config or model settings)."""
    for config in (getattr(session, "_run_config", None), getattr(session, "_base_model_settings", None)):
        tracing = config.get("tracing") if isinstance(config, dict) else None
        value = tracing.get("group_id") if isinstance(tracing, dict) else None
        if isinstance(value, str) and value:
            return value
    return None


@dataclass(slots=True)
class ToolCall:
    """One ``_handle_tool_call``: a handoff once the new agent's settings are built for it."""

    state: SessionState
    arrived_ns: int  # the function call reached the session
    begin_ns: int  # the session began to handle it
    from_agent: str | None
    parent: otel_context.Context | None
    tool_name: str | None
    tool_call_id: str | None
    sequence: int = 0  # counted once it is known to be a handoff
    to_agent: str | None = None
    settings_start_ns: int = 0
    settings_end_ns: int = 0
    update_sent_ns: int = 0  # session.update sent
    updated_ns: int = 0  # session.updated received
    output_sent_ns: int = 0  # the tool output (asking for a response) sent
    old_response: Any = None  # the response still running when the output was sent, if any
    drained_ns: int = 0  # the old response done (or none was running): response.create goes out
    interrupted: bool = False

    @property
    def is_handoff(self) -> bool:
        return bool(self.settings_start_ns)

    def sending(self, event: Any, now: int) -> None:
        """The session sends ``event`` to the model, for this tool call."""
        if not self.settings_start_ns:
            return
        name = type(event).__name__
        if name == "RealtimeModelSendSessionUpdate":
            self.update_sent_ns = self.update_sent_ns or now
        elif (
            name == "RealtimeModelSendToolOutput"
            and getattr(event, "start_response", False)
            and not self.output_sent_ns  # the same send again, through an override's super()
        ):
            self.output_sent_ns = now
            state = self.state
            self.old_response = state.running
            if state.running is None:
                self.drained_ns = now
            state.awaiting.append(self)
            refresh_watched(state.telemetry)

    def observe(self, kind: str, event: Any, now: int) -> bool:
        """An event from the model while awaiting output; True once the new agent's output came."""
        if kind == "raw_server_event":
            data = getattr(event, "data", None)
            if isinstance(data, dict) and data.get("type") == "session.updated" and not self.updated_ns:
                self.updated_ns = now
        elif kind == "turn_ended":
            if not self.drained_ns:
                self.drained_ns = now
        elif kind == "audio_interrupted":
            self.interrupted = True
        elif kind in _OUTPUT_DELTAS and self.drained_ns:
            old = self.old_response
            return old is None or old is True or getattr(event, "response_id", None) != old
        return False

    def phases(self, end_ns: int, error: BaseException | None, spoke: bool) -> list[PhaseRecord]:
        """The phases seen; one never finished is ended with the handoff, without a duration."""
        settings_start, settings_end = self.settings_start_ns, self.settings_end_ns
        phases = [
            PhaseRecord(
                sc.PHASE_ON_HANDOFF,
                self.begin_ns,
                settings_start or end_ns,
                None,
                None if settings_start else error,
            )
        ]
        if not settings_start:
            return phases
        phases.append(
            PhaseRecord(
                sc.PHASE_SETTINGS,
                settings_start,
                settings_end or end_ns,
                None,
                None if settings_end else error,
            )
        )
        if self.update_sent_ns:
            phases.append(PhaseRecord(sc.PHASE_SESSION_UPDATE, self.update_sent_ns, self.updated_ns))
        if self.output_sent_ns:
            drained = self.drained_ns
            phases.append(PhaseRecord(sc.PHASE_RESPONSE_DRAIN, self.output_sent_ns, drained))
            if drained:
                phases.append(PhaseRecord(sc.PHASE_FIRST_AUDIO, drained, end_ns if spoke else 0))
        return phases

    def emit(self, end_ns: int, error: BaseException | None = None, ended_by: str | None = None) -> None:
        attributes: dict[str, Any] = {}
        if self.output_sent_ns:
            attributes[sc.OLD_RESPONSE_RUNNING] = self.old_response is not None
        if self.interrupted:
            attributes[sc.INTERRUPTED] = True
        conversation = self.state.conversation
        if error is not None and not self.sequence:
            self.sequence = conversation.next_sequence()
        if conversation.conversation_id is None:
            conversation.conversation_id = self.state.server_session_id or None
        emit_tool_handoff(
            conversation, self, self.arrived_ns, end_ns, sc.TRIGGER_REALTIME_TOOL, attributes, error, ended_by
        )


class SessionState:
    """One realtime session: its conversation, the response running, handoffs awaiting output."""

    __slots__ = (
        "__weakref__",
        "arrivals",
        "awaiting",
        "conversation",
        "parent",
        "running",
        "server_session_id",
        "telemetry",
    )

    def __init__(self, telemetry: AgentsTelemetry, session: Any) -> None:
        self.telemetry = telemetry
        self.parent = current_parent()  # where the app started the session
        self.conversation = Conversation(
            telemetry, time.time_ns(), otel_context.get_current(), group_id(session)
        )
        self.arrivals: dict[str, int] = {}  # call id -> when the function call arrived
        self.running: Any = None  # the response in progress: its id, or True when it has none
        self.awaiting: list[ToolCall] = []  # handoffs whose new agent has not spoken yet
        # the server's own id of the session; "" when its first event did not give one
        self.server_session_id: str | None = None

    def observe(self, event: Any, now: int) -> None:
        """Every event the model sends the session (``RealtimeSession.on_event``)."""
        kind = getattr(event, "type", None)
        if kind == "function_call":
            call_id = getattr(event, "call_id", None)
            if call_id is not None:
                self.arrivals[call_id] = now
        elif kind == "turn_started":
            self.running = getattr(event, "response_id", None) or True
        elif kind == "turn_ended":
            self.running = None
        elif kind == "raw_server_event" and self.server_session_id is None:
            # the server's first event is session.created: its id, or none to wait for any more
            data = getattr(event, "data", None)
            value = None
            if isinstance(data, dict) and data.get("type") == "session.created":
                session = data.get("session")
                value = session.get("id") if isinstance(session, dict) else None
            self.server_session_id = value if isinstance(value, str) and value else ""
            refresh_watched(self.telemetry)
        awaiting = self.awaiting
        if awaiting:
            for call in list(awaiting):
                if call.observe(kind, event, now):
                    awaiting.remove(call)
                    refresh_watched(self.telemetry)
                    call.emit(now)

    def tool_call(self, session: Any, event: Any) -> ToolCall:
        now = time.time_ns()
        call_id = getattr(event, "call_id", None)
        agent = getattr(session, "_current_agent", None)
        return ToolCall(
            state=self,
            arrived_ns=self.arrivals.pop(call_id, now),
            begin_ns=now,
            from_agent=getattr(agent, "name", None),
            parent=current_parent() or self.parent,
            tool_name=getattr(event, "name", None),
            tool_call_id=call_id,
        )

    def settings_started(self, call: ToolCall, agent: Any) -> None:
        call.settings_start_ns = time.time_ns()
        call.to_agent = getattr(agent, "name", None)
        call.sequence = self.conversation.next_sequence()

    def failed(self, call: ToolCall, error: BaseException, agent: Any) -> None:
        """A tool call raised: a handoff's (the app's ``on_handoff``, say) becomes an ERROR span."""
        if call in self.awaiting:
            self.awaiting.remove(call)
            refresh_watched(self.telemetry)
        if call.is_handoff or call.tool_name in handoff_tool_names(agent):
            call.emit(time.time_ns(), error=error)

    def close(self) -> None:
        """The session closes: handoffs still awaiting output end now, then the session's root."""
        now = time.time_ns()
        awaiting, self.awaiting = self.awaiting, []
        for call in awaiting:
            call.emit(now, ended_by=sc.ENDED_BY_SESSION_CLOSE)
        self.conversation.end(now)


def handoff_tool_names(agent: Any) -> set[str]:
    """The tool names of an agent's handoffs (only read when a tool call failed)."""
    from agents.handoffs import Handoff

    names = set()
    for entry in getattr(agent, "handoffs", None) or ():
        names.add(entry.tool_name if isinstance(entry, Handoff) else Handoff.default_tool_name(entry))
    return names
