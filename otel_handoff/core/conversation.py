"""A conversation (session, chat, channel, flow): where its handoffs are counted and parented."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from opentelemetry import context as otel_context

from . import delivery
from .emit import Emitted, emit
from .record import HandoffRecord
from .spans import ChatRoot, HandoffTelemetry, end_root_when_gone


class Conversation:
    """One conversation (session, chat, channel, flow): its handoff count and, maybe, its root.

    ``agent_handoff.sequence`` is 1, 2, … per conversation, counted when a handoff is requested.
    A handoff without a parent of its own goes under the conversation's ``agent_handoff.chat``
    root, started lazily so a conversation without handoffs leaves no span.
    """

    __slots__ = (
        "__weakref__",
        "_delivered",
        "_root",
        "conversation_id",
        "handoffs",
        "root_parent",
        "start_ns",
        "telemetry",
    )

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
        self._delivered = 0  # handoffs counted when its spans were last sent on their way
        self._root: ChatRoot | None = None

    def next_sequence(self) -> int:
        self.handoffs += 1
        return self.handoffs

    def withdraw(self, sequence: int) -> None:
        """A handoff counted but left to a later run gives its number back, unless one was counted
        after it (a Strands swarm interrupted mid-handoff: the run that resumes it counts it)."""
        if sequence and sequence == self.handoffs:
            self.handoffs -= 1

    def _under_root(self, end_ns: int) -> otel_context.Context:
        """The conversation's root, for a handoff without a parent of its own that ends at ``end_ns``."""
        root = self._root
        if root is None:
            telemetry = self.telemetry
            root = self._root = ChatRoot(
                telemetry.tracer, telemetry.static_attributes, self.start_ns, self.root_parent
            )
            end_root_when_gone(self, root)
        root.last_ns, root.handoffs = end_ns, self.handoffs  # where it ends if nobody says
        return root.context()

    def emit(
        self, *, start_ns: int, end_ns: int, parent: otel_context.Context | None, **fields: Any
    ) -> Emitted:
        """Emit a handoff of this conversation: under its root unless it has a parent of its own."""
        end_ns = max(end_ns, start_ns)
        fields.setdefault("conversation_id", self.conversation_id)
        if parent is None:
            parent = self._under_root(end_ns)
        return emit(self.telemetry, HandoffRecord(start_ns=start_ns, end_ns=end_ns, parent=parent, **fields))

    def land(
        self, decision: Any, outcome: str, end_ns: int, error: BaseException | None = None, **fields: Any
    ) -> Emitted:
        """A handoff decided at one moment that lands (or not) later, with no phases (AG2).

        ``decision`` has the decision's ``start_ns``, ``parent``, ``sequence``, ``kind`` and
        ``tool_name``; its duration is decision to landing.
        """
        end_ns = max(end_ns, decision.start_ns)
        return self.emit(
            start_ns=decision.start_ns,
            end_ns=end_ns,
            parent=decision.parent,
            sequence=decision.sequence,
            outcome=outcome,
            kind=decision.kind,
            tool_name=decision.tool_name or None,
            error=error,
            duration=(end_ns - decision.start_ns) / 1e9,
            **fields,
        )

    def run_ended(self) -> None:
        """A run of the conversation ended (the app may return, or its process end, now): what it
        left of ours in the batch leaves the process, off the app's thread."""
        if self.handoffs != self._delivered:
            self._delivered = self.handoffs
            delivery.conversation_ended(self.telemetry.tracer)

    def end(self, end_ns: int, error: BaseException | None = None) -> None:
        """The conversation is over: its root, if it has one, ends now, and its spans leave."""
        if self._root is not None:
            self._root.end(self.handoffs, end_ns, error)
        self.run_ended()


class Conversations:
    """The conversations a framework names by id (an ADK session, a LangGraph thread), the most
    recently used kept: their handoff counts go on across runs, within a bounded memory."""

    __slots__ = ("_kept", "_known", "telemetry")

    def __init__(self, telemetry: HandoffTelemetry, kept: int = 4096) -> None:
        self.telemetry = telemetry
        self._kept = kept
        self._known: OrderedDict[Any, Conversation] = OrderedDict()

    def get(self, key: Any, conversation_id: str | None, now: int) -> Conversation:
        """The conversation of ``key`` (``None``: a conversation of its own, not remembered)."""
        if key is None:
            return Conversation(self.telemetry, now, None, conversation_id)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = Conversation(self.telemetry, now, None, conversation_id)
            if len(self._known) > self._kept:
                self._known.popitem(last=False)
        else:
            self._known.move_to_end(key)
        return found
