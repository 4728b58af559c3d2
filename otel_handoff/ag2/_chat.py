"""Per-chat handoff state and how a decided handoff becomes an ``agent_handoff`` span.

A handoff is *decided* in one place (a tool's return value, a context condition, an
after-work, a guardrail) and *lands* later, when the next speaker starts its turn. Between
the two AG2 may select the speaker (an LLM call under ``'auto'``), override the decision
(a later guardrail wins) or end the chat. A decision is therefore kept as plain data and
becomes a span, with its real start and end times, once its fate is known: nothing we
start is ever left open or made current, whatever the chat does.

State is keyed on the ``GroupChatManager`` (``run_chat`` sees a shallow copy of the
``GroupChat``), weakly, so a finished chat's objects are never kept alive.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.spans import HandoffTelemetry
from ._features import AG2Features


@dataclass
class Decision:
    """One handoff as decided by AG2, before we know where it lands."""

    kind: str
    from_agent: str
    target: Any
    start_ns: int
    condition_type: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    parent: otel_context.Context | None = None  # the app's context at the decision, if it traces chats
    sequence: int = 0
    terminates: bool = False  # the target resolved to "end the chat"


@dataclass(kw_only=True)
class GroupChatTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    features: AG2Features
    chats: weakref.WeakKeyDictionary[Any, ChatState] = field(default_factory=weakref.WeakKeyDictionary)
    chats_lock: threading.Lock = field(default_factory=threading.Lock)
    # agents and managers whose reply-function lists hold our wrappers, restored at uninstrument()
    patched_agents: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    patched_managers: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    # (AG2's reply function, our wrapper of it) for the reply functions agents register, and
    # for those a GroupChatManager registers at construction
    agent_reply_funcs: tuple[tuple[Any, Any], ...] = ()
    manager_reply_funcs: tuple[tuple[Any, Any], ...] = ()

    def begin_chat(self, manager: Any) -> ChatState | None:
        """Track a chat from ``run_chat``; None if disabled or this manager's chat is already tracked."""
        if not self.enabled:
            return None
        with self.chats_lock:
            if manager in self.chats:
                return None
            chat = self.chats[manager] = ChatState(self)
        return chat

    def end_chat(self, manager: Any, chat: ChatState, error: BaseException | None) -> None:
        with self.chats_lock:
            if self.chats.get(manager) is chat:
                del self.chats[manager]
        chat.finish(error)

    def chat_of(self, agent: Any) -> ChatState | None:
        """The running chat of a group agent (agents, the tool executor and users link their manager)."""
        manager = getattr(agent, "_group_manager", None)
        if manager is None or not self.enabled:
            return None
        return self.chats.get(manager)


class ChatState:
    """One running group chat: its pending decision and its conversation (count, maybe a root)."""

    __slots__ = ("after_work_no_match", "app_traced", "conversation", "pending", "start_context", "telemetry")

    def __init__(self, telemetry: GroupChatTelemetry) -> None:
        self.telemetry = telemetry
        self.start_context = otel_context.get_current()
        # the app (or openinference) traces this chat: handoffs nest where they are decided
        self.app_traced = trace.get_current_span(self.start_context).get_span_context().is_valid
        self.pending: Decision | None = None
        # (from agent, time) of an after-work evaluation that matched nothing: the group's after-work is next
        self.after_work_no_match: tuple[str, int] | None = None
        self.conversation = Conversation(telemetry, time.time_ns(), self.start_context)

    # --- decisions ---------------------------------------------------------------------
    def decide(self, decision: Decision) -> None:
        """AG2 decided a handoff; a decision still pending was overridden by it."""
        if self.app_traced:
            current = otel_context.get_current()
            valid = trace.get_current_span(current).get_span_context().is_valid
            decision.parent = current if valid else self.start_context
        decision.sequence = self.conversation.next_sequence()
        if self.pending is not None:
            self._emit(self.pending, sc.OUTCOME_SKIPPED, None, decision.start_ns)
        self.pending = decision

    def speaker_starts(self, speaker: Any) -> None:
        """The next speaker's turn begins: the pending handoff, if any, has landed."""
        decision, self.pending = self.pending, None
        if decision is not None:
            self._emit(decision, sc.OUTCOME_COMPLETED, getattr(speaker, "name", None), time.time_ns())

    def finish(self, error: BaseException | None) -> None:
        """The chat is over: a pending handoff completed if it ended the chat, else it never landed."""
        decision, self.pending = self.pending, None
        end_ns = time.time_ns()
        try:
            if decision is not None:
                if error is not None:
                    self._emit(decision, sc.OUTCOME_ERROR, None, end_ns, error)
                else:
                    outcome = sc.OUTCOME_COMPLETED if decision.terminates else sc.OUTCOME_SKIPPED
                    self._emit(decision, outcome, None, end_ns)
        finally:  # the chat's root span ends whatever happened above
            self.conversation.end(end_ns, error)

    def _emit(
        self,
        decision: Decision,
        outcome: str,
        next_speaker: str | None,
        end_ns: int,
        error: BaseException | None = None,
    ) -> None:
        """The decision as a record: decision-to-landing is its duration."""
        attributes: dict[str, Any] = {}
        if decision.target is not None:
            attributes[sc.TARGET_TYPE] = type(decision.target).__name__
        if next_speaker:
            attributes[sc.NEXT_SPEAKER] = next_speaker
        if decision.condition_type:
            attributes[sc.CONDITION_TYPE] = decision.condition_type
        self.conversation.land(
            decision,
            outcome,
            end_ns,
            error,
            from_agent=decision.from_agent,
            to_agent=getattr(decision.target, "agent_name", None) or next_speaker or None,
            tool_call_id=decision.tool_call_id or None,
            attributes=attributes,
        )
