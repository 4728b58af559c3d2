"""LangGraph handoffs as records: one per ``Command(graph=PARENT)`` target and per hand-back.

A handoff tool (the swarm's, the supervisor's, the app's own) returns
``Command(goto=<agent>, graph=Command.PARENT, update=…)``; LangGraph raises ``ParentCommand`` to
bubble it to the parent graph, which merges the update, ends its step and runs the target node;
that node's agent calls its model. A supervisor's worker hands back on a static edge (with
langgraph-supervisor's ``transfer_back_to_…`` messages) and the supervisor's model call that
follows is part of that hand-back. The wrappers (``_wrappers``) report those moments here;
between handoffs they test one counter and return.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from ..core import schema as sc
from ..core.conversation import Conversation, Conversations
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

# the graph invocation (top-level ``stream``/``astream``) the current task, tool or model call is part of
CURRENT: ContextVar[Invocation | None] = ContextVar("otel_handoff_langgraph_invocation", default=None)


@dataclass
class GraphTelemetry(HandoffTelemetry):
    """What the wrappers need, built once at ``instrument()``, and what is in flight."""

    parent_marker: str = "__parent__"  # Command.PARENT
    command_type: type | None = None
    send_type: type | None = None
    bubble_types: tuple[type[BaseException], ...] = ()  # GraphBubbleUp: an interrupt, no failure
    # per thread: the handoff count goes on across invocations
    threads: Conversations = field(init=False)
    # handoffs whose target node has not started, and those whose node awaits its model call:
    # what a node step and a model call test before anything else (changed under the lock)
    unstarted: int = 0
    unspoken: int = 0
    in_flight: int = 0  # every handoff until it ends: what a checkpoint write tests
    lock: threading.Lock = field(default_factory=threading.Lock)
    handback_wrapped: Any = None  # langgraph-supervisor's module, once its hand-back is wrapped

    def __post_init__(self) -> None:
        self.threads = Conversations(self)


@dataclass(slots=True, eq=False)
class Handoff:
    """One handoff, as timestamps until the new agent's first output (0: not seen)."""

    invocation: Invocation
    sequence: int
    from_agent: str | None
    to_agent: str
    trigger: str
    tool_name: str | None
    tool_call_id: str | None
    start_ns: int
    graph_ns: str = ""  # the checkpoint namespace of the graph the target node is in ("" top level)
    node_ns: str = ""  # the target node's, once it started
    handler_end_ns: int = 0  # the tool returned its Command (tool handoffs)
    node_start_ns: int = 0  # the target node started in the parent graph
    model_start_ns: int = 0  # the new agent's model call
    writes_before: int = 0  # the invocation's checkpoint writes when it was decided
    done: bool = False

    def phases(self, end_ns: int, spoke: bool) -> list[PhaseRecord]:
        phases = []
        updated_from = self.start_ns
        if self.handler_end_ns:
            phases.append(PhaseRecord(sc.PHASE_HANDLER, self.start_ns, self.handler_end_ns))
            updated_from = self.handler_end_ns
        phases.append(PhaseRecord(sc.PHASE_CONTEXT_UPDATE, updated_from, self.node_start_ns))
        if not self.node_start_ns:
            return phases
        phases.append(PhaseRecord(sc.START, self.node_start_ns, self.model_start_ns))
        if self.model_start_ns:
            phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, self.model_start_ns, end_ns if spoke else 0))
        return phases

    def emit(self, end_ns: int, *, spoke: bool, error: BaseException | str | None = None) -> None:
        """One record: completed when the new agent spoke; ``rejected`` when LangGraph never ran
        the target (an unknown node, which it ignores with a warning, or a run stopped before
        it); else how it ended."""
        attributes: dict[str, Any] = {sc.CHECKPOINT_WRITES: self.invocation.writes - self.writes_before}
        outcome = sc.OUTCOME_COMPLETED if error is None else sc.OUTCOME_ERROR
        if not spoke and error is None:
            if self.node_start_ns:
                attributes[sc.ENDED_BY] = sc.ENDED_BY_RUN_END
            else:
                outcome = sc.OUTCOME_REJECTED
                attributes[sc.REJECTION_REASON] = sc.REJECTED_TARGET_NOT_RUN
        end_ns = max(end_ns, self.start_ns)
        self.invocation.conversation.emit(
            start_ns=self.start_ns,
            end_ns=end_ns,
            parent=self.invocation.parent,
            sequence=self.sequence,
            outcome=outcome,
            from_agent=self.from_agent,
            to_agent=self.to_agent,
            trigger=self.trigger,
            tool_name=self.tool_name,
            tool_call_id=self.tool_call_id,
            error=error,
            attributes=attributes,
            phases=self.phases(end_ns, spoke),
            duration=(end_ns - self.start_ns) / 1e9,
        )


class Invocation:
    """One top-level graph invocation (``invoke``/``stream`` and their async forms): its handoffs
    until each one's new agent speaks."""

    __slots__ = ("conversation", "ended", "handoffs", "loop_id", "parent", "telemetry", "token", "writes")

    def __init__(
        self,
        telemetry: GraphTelemetry,
        conversation: Conversation,
        parent: otel_context.Context,
        loop_id: int,
    ) -> None:
        self.telemetry = telemetry
        self.conversation = conversation
        self.parent = parent
        # LangGraph's loop of the top-level run, by id: the run's tasks' contexts hold this
        # invocation, and a reference to the loop from there would keep it for the collector
        # (LangGraph frees its loop by reference count: its own tests check that)
        self.loop_id = loop_id
        self.token: Any = None  # CURRENT's, set while it runs
        self.handoffs: list[Handoff] = []
        self.ended = False
        self.writes = 0  # the checkpointer's, counted while a handoff is in flight

    def decided(self, **fields: Any) -> Handoff:
        """A handoff asked for (``fields``: :class:`Handoff`'s from ``from_agent`` on): it waits for
        its target node in the graph at ``graph_ns``."""
        handoff = Handoff(self, self.conversation.next_sequence(), writes_before=self.writes, **fields)
        telemetry = self.telemetry
        with telemetry.lock:
            self.handoffs.append(handoff)
            telemetry.unstarted += 1
            telemetry.in_flight += 1
        return handoff

    def failed(self, error: BaseException, **fields: Any) -> None:
        """A handoff tool raised before returning its ``Command``: a failed handoff, emitted at
        once and never in flight (``fields`` as for :meth:`decided`)."""
        handoff = Handoff(self, self.conversation.next_sequence(), writes_before=self.writes, **fields)
        handoff.done = True
        handoff.emit(handoff.handler_end_ns, spoke=False, error=error)

    def node_started(self, node: str, namespace: str) -> None:
        """A node started (its task's checkpoint namespace): the handoffs to it, in its graph, wait
        for its model call."""
        now = time.time_ns()
        graph_ns = namespace.rpartition("|")[0]
        telemetry = self.telemetry
        with telemetry.lock:
            for handoff in self.handoffs:
                if handoff.to_agent == node and handoff.graph_ns == graph_ns and not handoff.node_start_ns:
                    handoff.node_start_ns = now
                    handoff.node_ns = namespace
                    telemetry.unstarted -= 1
                    telemetry.unspoken += 1

    def model_started(self, namespace: str, start_ns: int) -> Handoff | None:
        """A model run at ``namespace``: the first one inside a handoff's target node is awaited."""
        telemetry = self.telemetry
        with telemetry.lock:
            for handoff in self.handoffs:
                node_ns = handoff.node_ns
                if (
                    node_ns
                    and not handoff.model_start_ns
                    and (namespace == node_ns or namespace.startswith(node_ns + "|"))
                ):
                    handoff.model_start_ns = start_ns
                    telemetry.unspoken -= 1
                    return handoff
        return None

    def spoke(self, handoff: Handoff, error: BaseException | None = None) -> None:
        """The new agent's first output (a token, or its whole answer, or its failure)."""
        now = time.time_ns()
        if self._settle(handoff):
            handoff.emit(now, spoke=error is None, error=error)

    def end(self, error: BaseException | None) -> None:
        """The invocation ended: what still waits ends with it."""
        self.ended = True
        now = time.time_ns()
        for handoff in list(self.handoffs):
            if self._settle(handoff):
                handoff.emit(now, spoke=False, error=error)
        self.conversation.run_ended()

    def _settle(self, handoff: Handoff) -> bool:
        """Take a handoff out of flight, once."""
        telemetry = self.telemetry
        with telemetry.lock:
            if handoff.done:
                return False
            handoff.done = True
            telemetry.in_flight -= 1
            if handoff in self.handoffs:
                self.handoffs.remove(handoff)
            if not handoff.node_start_ns:
                telemetry.unstarted -= 1
            elif not handoff.model_start_ns:
                telemetry.unspoken -= 1
        return True
