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
from opentelemetry.trace import SpanKind

from ..core import schema as sc
from ..core.metrics import HandoffMetrics
from ..core.spans import ChatRoot, set_error
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


@dataclass
class GroupChatTelemetry:
    """What every wrapper needs, built once at ``instrument()``."""

    tracer: trace.Tracer
    features: AG2Features
    static_attributes: dict[str, Any]
    metrics: HandoffMetrics
    enabled: bool = True
    chats: weakref.WeakKeyDictionary[Any, ChatState] = field(default_factory=weakref.WeakKeyDictionary)
    chats_lock: threading.Lock = field(default_factory=threading.Lock)
    # agents and managers whose reply-function lists hold our wrappers, restored at uninstrument()
    patched_agents: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    patched_managers: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)
    # (AG2's reply function, our wrapper of it) for the reply functions agents register
    agent_reply_funcs: tuple[tuple[Any, Any], ...] = ()

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
    """One running group chat: its pending decision, its handoff count and (maybe) its root span."""

    __slots__ = (
        "_root",
        "after_work_no_match",
        "app_traced",
        "handoffs",
        "pending",
        "start_context",
        "start_ns",
        "telemetry",
    )

    def __init__(self, telemetry: GroupChatTelemetry) -> None:
        self.telemetry = telemetry
        self.start_ns = time.time_ns()
        self.start_context = otel_context.get_current()
        # the app (or openinference) traces this chat: handoffs nest where they are decided
        self.app_traced = trace.get_current_span(self.start_context).get_span_context().is_valid
        self.handoffs = 0
        self.pending: Decision | None = None
        # (from agent, time) of an after-work evaluation that matched nothing: the group's after-work is next
        self.after_work_no_match: tuple[str, int] | None = None
        self._root = ChatRoot(
            telemetry.tracer, telemetry.static_attributes, self.start_ns, self.start_context
        )

    # --- decisions ---------------------------------------------------------------------
    def decide(self, decision: Decision) -> None:
        """AG2 decided a handoff; a decision still pending was overridden by it."""
        if self.app_traced:
            current = otel_context.get_current()
            valid = trace.get_current_span(current).get_span_context().is_valid
            decision.parent = current if valid else self.start_context
        self.handoffs += 1
        decision.sequence = self.handoffs
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
            self._root.end(self.handoffs, end_ns, error)

    # --- spans ---------------------------------------------------------------------------
    def _parent(self, decision: Decision) -> otel_context.Context:
        if decision.parent is not None:
            return decision.parent
        return self._root.context()

    def _emit(
        self,
        decision: Decision,
        outcome: str,
        next_speaker: str | None,
        end_ns: int,
        error: BaseException | None = None,
    ) -> None:
        attributes = dict(self.telemetry.static_attributes)
        attributes[sc.KIND] = decision.kind
        attributes[sc.SEQUENCE] = decision.sequence
        attributes[sc.OUTCOME] = outcome
        attributes[sc.GEN_AI_HANDOFF_FROM_AGENT] = decision.from_agent
        if decision.target is not None:
            attributes[sc.TARGET_TYPE] = type(decision.target).__name__
        to_agent = getattr(decision.target, "agent_name", None) or next_speaker
        if to_agent:
            attributes[sc.GEN_AI_HANDOFF_TO_AGENT] = to_agent
        if next_speaker:
            attributes[sc.NEXT_SPEAKER] = next_speaker
        if decision.condition_type:
            attributes[sc.CONDITION_TYPE] = decision.condition_type
        if decision.tool_name:
            attributes[sc.GEN_AI_TOOL_NAME] = decision.tool_name
        if decision.tool_call_id:
            attributes[sc.GEN_AI_TOOL_CALL_ID] = decision.tool_call_id
        emit_handoff(
            self.telemetry.tracer,
            self.telemetry.metrics,
            attributes,
            self._parent(decision),
            decision.start_ns,
            end_ns,
            error,
        )


def emit_handoff(
    tracer: trace.Tracer,
    metrics: HandoffMetrics,
    attributes: dict[str, Any],
    parent: otel_context.Context,
    start_ns: int,
    end_ns: int,
    error: BaseException | None = None,
) -> None:
    """One finished ``agent_handoff`` span, created with its real times, and its metrics."""
    attributes[sc.DURATION] = max(0, end_ns - start_ns) / 1e9
    span = tracer.start_span(
        sc.SPAN_HANDOFF, context=parent, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start_ns
    )
    if error is not None:
        set_error(span, error)
    span.end(end_time=end_ns)
    metrics.record_handoff(attributes[sc.DURATION], attributes, trace.set_span_in_context(span))
