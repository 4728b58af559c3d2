"""The one handoff model: what a framework package observes, as plain data.

A framework package fills a :class:`HandoffRecord` while (or after) a handoff runs, with real
start and end times, and hands it to :func:`otel_handoff.core.emit.emit`, which makes every span
and metric of it. Nothing here touches OpenTelemetry's current context, so a record can be filled
anywhere in the framework's code without the app seeing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Link

from .spans import ChatRoot, HandoffTelemetry


@dataclass(slots=True)
class PhaseRecord:
    """One phase of a handoff (a name of ``schema.PHASES``), with its real times."""

    name: str
    start_ns: int
    end_ns: int = 0  # 0: still running when the handoff ended (it is ended with the handoff)
    attributes: dict[str, Any] | None = None
    error: BaseException | str | None = None  # an exception, or an error type such as "timeout"
    own_ns: int | None = None  # its own time, when a phase nested in it is counted on its own


@dataclass(slots=True)
class HandoffRecord:
    """One finished handoff: who, why, how it ended, and its phases."""

    start_ns: int
    end_ns: int
    sequence: int
    outcome: str
    parent: otel_context.Context | None  # None: the current context
    from_agent: str | None = None
    from_agent_id: str | None = None
    to_agent: str | None = None
    to_agent_id: str | None = None
    trigger: str | None = None  # how it was asked for (LiveKit, Pipecat)
    kind: str | None = None  # which mechanism decided it (AG2)
    tool_name: str | None = None
    tool_call_id: str | None = None
    conversation_id: str | None = None  # only a value the framework or the app gave
    links: list[Link] | None = None
    error: BaseException | str | None = None  # status ERROR with error.type
    attributes: dict[str, Any] = field(default_factory=dict)  # the framework's own attributes
    phases: list[PhaseRecord] = field(default_factory=list)
    # seconds for agent_handoff.duration; None: the sum of the phases whose role is "work"
    duration: float | None = None


class Conversation:
    """One conversation (session, chat, channel, flow): its handoff count and, maybe, its root.

    ``agent_handoff.sequence`` is 1, 2, … per conversation, counted when a handoff is requested.
    A handoff without a parent of its own goes under the conversation's ``agent_handoff.chat``
    root, started lazily so a conversation without handoffs leaves no span.
    """

    __slots__ = ("_root", "conversation_id", "handoffs", "root_parent", "start_ns", "telemetry")

    def __init__(
        self,
        telemetry: HandoffTelemetry,
        start_ns: int,
        root_parent: otel_context.Context | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.start_ns = start_ns
        self.root_parent = root_parent  # None: the current context; an empty Context: a new trace
        self.conversation_id = conversation_id
        self.handoffs = 0
        self._root: ChatRoot | None = None

    def next_sequence(self) -> int:
        self.handoffs += 1
        return self.handoffs

    def parent(self, own: otel_context.Context | None) -> otel_context.Context:
        """``own`` when the handoff has a parent of its own, else the conversation's root."""
        if own is not None:
            return own
        if self._root is None:
            telemetry = self.telemetry
            self._root = ChatRoot(
                telemetry.tracer, telemetry.static_attributes, self.start_ns, self.root_parent
            )
        return self._root.context()

    def end(self, end_ns: int, error: BaseException | None = None) -> None:
        """The conversation is over: its root, if it has one, ends now."""
        if self._root is not None:
            self._root.end(self.handoffs, end_ns, error)
