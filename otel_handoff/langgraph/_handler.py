"""LangGraph handoffs, seen through LangChain's callbacks: one record per ``Command(graph=PARENT)``.

A handoff tool (the swarm's, the supervisor's, the app's own) returns
``Command(goto=<agent>, graph=Command.PARENT, update=…)``; LangGraph raises ``ParentCommand`` to
bubble it to the parent graph, which merges the update, ends its step and runs the target node.
What the callbacks show of it, in order: the tool's start and its ``Command`` (``on_tool_end``),
the target node's start (``on_chain_start`` with ``langgraph_node``), the new agent's model call
(``on_chat_model_start``) and its first token or its end. A supervisor's worker hands back on a
static edge: its node ends with langgraph-supervisor's ``transfer_back_to_…`` pair of messages,
and the supervisor's model call that follows is part of that hand-back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.conversation import Conversation, Conversations
from ..core.faults import report
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

_HANDBACK_PREFIX = "transfer_back_to_"  # langgraph-supervisor's hand-back tool pair


@dataclass
class GraphTelemetry(HandoffTelemetry):
    """What the handler needs, built once at ``instrument()``."""

    parent_marker: str = "__parent__"  # Command.PARENT
    command_type: type | None = None
    send_type: type | None = None
    # per thread: the handoff count goes on across invocations
    threads: Conversations = field(init=False)

    def __post_init__(self) -> None:
        self.threads = Conversations(self)


@dataclass(slots=True)
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
    handler_end_ns: int = 0  # the tool returned its Command (tool handoffs)
    node_start_ns: int = 0  # the target node started in the parent graph
    model_start_ns: int = 0  # the new agent's model call

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
        attributes: dict[str, Any] = {}
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


@dataclass(slots=True)
class Tool:
    """A tool run, until it returns: a handoff if it returns ``Command(graph=PARENT)``."""

    name: str | None
    call_id: str | None
    start_ns: int
    agent: str | None  # the agent (top-level node) running it
    destination: str | None  # what a handoff tool of the swarm or supervisor names as its target

    def handoff(self, invocation: Invocation, target: str, now: int) -> Handoff:
        return Handoff(
            invocation=invocation,
            sequence=invocation.conversation.next_sequence(),
            from_agent=self.agent,
            to_agent=target,
            trigger=sc.TRIGGER_TOOL,
            tool_name=self.name,
            tool_call_id=self.call_id,
            start_ns=self.start_ns,
            handler_end_ns=now,
        )


class Invocation:
    """One graph invocation (``invoke``/``stream`` and their async forms): its handoffs in flight."""

    __slots__ = ("conversation", "handoffs", "nodes", "parent", "tools")

    def __init__(self, conversation: Conversation, parent: otel_context.Context) -> None:
        self.conversation = conversation
        self.parent = parent
        self.tools: dict[UUID, Tool] = {}
        self.nodes: dict[UUID, str] = {}  # the parent graph's agent nodes running: run id -> name
        self.handoffs: list[Handoff] = []  # asked for, until the new agent's first output


def _agent_of(metadata: dict[str, Any] | None) -> str | None:
    """The top-level node (agent) a run belongs to: the first segment of its checkpoint namespace."""
    namespace = (metadata or {}).get("langgraph_checkpoint_ns") or ""
    first = namespace.split("|", 1)[0].split(":", 1)[0]
    return first or None


class HandoffCallbackHandler(BaseCallbackHandler):
    """Observes every LangChain run for handoffs; adds nothing to what the app's callbacks get.

    Inline (never in an executor thread), and deaf to model events unless a handoff waits for
    its new agent's first output, so a streamed token costs a flag test.
    """

    run_inline = True
    raise_error = False

    def __init__(self, telemetry: GraphTelemetry) -> None:
        self.telemetry = telemetry
        self.invocations: dict[UUID, Invocation] = {}  # root run id -> invocation
        self.roots: dict[UUID, UUID] = {}  # run id -> its root run id (runs we still need)
        self.awaiting = 0  # handoffs whose new agent's model output is awaited
        self.model_runs: dict[UUID, Handoff] = {}  # the new agents' model runs -> their handoff

    # what to hear: model events only while a handoff waits for output
    @property
    def ignore_llm(self) -> bool:
        return not self.awaiting

    @property
    def ignore_chat_model(self) -> bool:
        """A model call starts once per agent step: heard while a handoff waits for one."""
        return not any(invocation.handoffs for invocation in self.invocations.values())

    @property
    def ignore_retriever(self) -> bool:
        return True

    @property
    def ignore_retry(self) -> bool:
        return True

    @property
    def ignore_custom_event(self) -> bool:
        return True

    # --- runs -------------------------------------------------------------------------------------

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            if parent_run_id is None:
                self._root_started(run_id, metadata)
                return
            root = self.roots.get(parent_run_id)
            if root is None:
                return
            self.roots[run_id] = root
            invocation = self.invocations.get(root)
            node = (metadata or {}).get("langgraph_node")
            if invocation is None or node is None or kwargs.get("name") != node:
                return
            namespace = (metadata or {}).get("langgraph_checkpoint_ns") or ""
            if "|" in namespace or invocation.nodes.get(parent_run_id) == node:
                return  # a node inside an agent's subgraph, or the agent's graph inside its node
            invocation.nodes[run_id] = node
            now = time.time_ns()
            for handoff in invocation.handoffs:
                if handoff.to_agent == node and not handoff.node_start_ns:
                    handoff.node_start_ns = now
        except Exception as exc:
            report("LangGraph chain start", exc)

    def _root_started(self, run_id: UUID, metadata: dict[str, Any] | None) -> None:
        thread = (metadata or {}).get("thread_id")
        telemetry = self.telemetry
        now = time.time_ns()
        thread = thread if isinstance(thread, str) and thread else None
        conversation = telemetry.threads.get(thread, thread, now)
        current = otel_context.get_current()
        parent = (
            current if trace.get_current_span(current).get_span_context().is_valid else otel_context.Context()
        )
        self.invocations[run_id] = Invocation(conversation, parent)
        self.roots[run_id] = run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._run_ended(run_id, outputs, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """``ParentCommand`` is LangGraph's handoff mechanism: a run it ends is no error of ours."""
        self._run_ended(run_id, None, error)

    def _run_ended(self, run_id: UUID, outputs: Any, error: BaseException | None) -> None:
        try:
            root = self.roots.get(run_id)
            if root is None:
                return
            if run_id == root:
                self._root_ended(run_id, error)
                return
            del self.roots[run_id]
            invocation = self.invocations.get(root)
            if invocation is not None and invocation.nodes:
                node = invocation.nodes.pop(run_id, None)
                if node is not None and error is None:
                    self._maybe_handback(invocation, node, outputs)
        except Exception as exc:
            report("LangGraph run end", exc)

    def _root_ended(self, run_id: UUID, error: BaseException | None) -> None:
        invocation = self.invocations.pop(run_id, None)
        self.roots.pop(run_id, None)
        if invocation is None:
            return
        now = time.time_ns()
        for handoff in invocation.handoffs:
            if handoff.model_start_ns:
                self.awaiting -= 1
            handoff.emit(now, spoke=False, error=error)
        invocation.handoffs.clear()
        for run, handoff in list(self.model_runs.items()):
            if handoff.invocation is invocation:
                del self.model_runs[run]
        for run, run_root in list(self.roots.items()):  # runs that never ended (cancelled)
            if run_root == run_id:
                del self.roots[run]

    def _maybe_handback(self, invocation: Invocation, node: str, outputs: Any) -> None:
        """A supervisor's worker ends with langgraph-supervisor's ``transfer_back_to_…`` messages:
        the edge back to the supervisor is a handoff, the supervisor's next model call part of it."""
        messages = outputs.get("messages") if isinstance(outputs, dict) else None
        if not messages:
            return
        last = messages[-1]
        name = getattr(last, "name", None)
        if (
            getattr(last, "type", None) != "tool"
            or not isinstance(name, str)
            or not name.startswith(_HANDBACK_PREFIX)
        ):
            return
        now = time.time_ns()
        invocation.handoffs.append(
            Handoff(
                invocation=invocation,
                sequence=invocation.conversation.next_sequence(),
                from_agent=node,
                to_agent=name.removeprefix(_HANDBACK_PREFIX),
                trigger=sc.TRIGGER_HANDBACK,
                tool_name=name,
                tool_call_id=getattr(last, "tool_call_id", None),
                start_ns=now,
            )
        )

    # --- tools: where a handoff is decided ----------------------------------------------------------

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            root = self.roots.get(parent_run_id) if parent_run_id is not None else None
            invocation = self.invocations.get(root) if root is not None else None
            if invocation is None:
                return
            name = kwargs.get("name") or (serialized or {}).get("name")
            call_id = kwargs.get("tool_call_id")
            destination = (metadata or {}).get("__handoff_destination")  # swarm's and supervisor's tools
            invocation.tools[run_id] = Tool(
                name,
                call_id if isinstance(call_id, str) else None,
                time.time_ns(),
                _agent_of(metadata),
                destination if isinstance(destination, str) else None,
            )
            self.roots[run_id] = root
        except Exception as exc:
            report("LangGraph tool start", exc)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        try:
            root = self.roots.pop(run_id, None)
            invocation = self.invocations.get(root) if root is not None else None
            if invocation is None:
                return
            started = invocation.tools.pop(run_id, None)
            command_type = self.telemetry.command_type
            if started is None or command_type is None or not isinstance(output, command_type):
                return
            if getattr(output, "graph", None) != self.telemetry.parent_marker:
                return
            targets = self._targets(getattr(output, "goto", None))
            if not targets:
                return
            now = time.time_ns()
            for target in targets:
                invocation.handoffs.append(started.handoff(invocation, target, now))
        except Exception as exc:
            report("LangGraph tool end", exc)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A handoff tool (one that names its destination) raised: a failed handoff."""
        try:
            root = self.roots.pop(run_id, None)
            invocation = self.invocations.get(root) if root is not None else None
            started = invocation.tools.pop(run_id, None) if invocation is not None else None
            if invocation is None or started is None or started.destination is None:
                return
            handoff = started.handoff(invocation, started.destination, time.time_ns())
            handoff.emit(handoff.handler_end_ns, spoke=False, error=error)
        except Exception as exc:
            report("LangGraph tool error", exc)

    def _targets(self, goto: Any) -> list[str]:
        """``goto`` as node names: a name, a ``Send``, or a sequence of them (one handoff each)."""
        items = goto if isinstance(goto, (list, tuple)) else [goto]
        send_type = self.telemetry.send_type
        names = []
        for item in items:
            if isinstance(item, str) and item:
                names.append(item)
            elif send_type is not None and isinstance(item, send_type) and isinstance(item.node, str):
                names.append(item.node)
        return names

    # --- the new agent's model: only heard while a handoff awaits it --------------------------------

    def on_chat_model_start(
        self,
        serialized: Any,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._model_started(run_id, parent_run_id, kwargs.get("metadata"))

    def on_llm_start(
        self, serialized: Any, prompts: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._model_started(run_id, parent_run_id, kwargs.get("metadata"))

    def _model_started(self, run_id: UUID, parent_run_id: UUID | None, metadata: Any) -> None:
        try:
            root = self.roots.get(parent_run_id) if parent_run_id is not None else None
            invocation = self.invocations.get(root) if root is not None else None
            if invocation is None:
                return
            agent = _agent_of(metadata)
            for handoff in invocation.handoffs:
                if handoff.to_agent == agent and handoff.node_start_ns and not handoff.model_start_ns:
                    handoff.model_start_ns = time.time_ns()
                    self.awaiting += 1
                    self.model_runs[run_id] = handoff
                    return
        except Exception as exc:
            report("LangGraph model start", exc)

    def on_llm_new_token(self, token: str, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.model_runs:
            self._first_output(run_id)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.model_runs:
            self._first_output(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.model_runs:
            self._first_output(run_id, error)

    def _first_output(self, run_id: UUID, error: BaseException | None = None) -> None:
        """The new agent's first token (or its whole answer, or its failure): the handoff ends."""
        try:
            handoff = self.model_runs.pop(run_id)
            handoffs = handoff.invocation.handoffs
            if handoff in handoffs:
                handoffs.remove(handoff)
                self.awaiting -= 1
                handoff.emit(time.time_ns(), spoke=error is None, error=error)
        except Exception as exc:
            report("LangGraph first output", exc)
