"""Strands swarm handoffs as records, read off the hook events Strands dispatches anyway.

A ``Swarm`` gives every agent a ``handoff_to_agent`` tool that only records the target; the swarm
switches once the old agent's turn ends. That turn goes on after the tool (the "drain": by default
another model call, the old agent's closing reply) unless an ``AfterToolsEvent`` hook ends it.

Nothing of ours is on the per-token path (a streamed token costs Strands about 760 opcodes: 1 % is
7). We observe what Strands does once per model call, tool call or node, where it does it:

- the ``__init__`` of six hook event classes (Strands makes each where it dispatches it; we add no
  callback): the swarm's start and end, each node's start and end, each model call's start, each
  tool's end;
- ``streaming.handle_content_block_start``, once per content block: when a ``handoff_to_agent``
  call starts in the model's output (the handoff's start);
- ``streaming.handle_message_start``, once per model call: the new agent's model starts streaming
  its answer (its first output: a model's stream opens with it, as its first token arrives),
  tested only while a handoff awaits it. A node that ends first ends it there.
"""

from __future__ import annotations

import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from ..core import schema as sc
from ..core.conversation import Conversation, Conversations
from ..core.faults import report
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

TOOL_NAME = "handoff_to_agent"  # the tool the swarm gives every agent
# the reason SwarmState.should_continue gives -> agent_handoff.rejection_reason
_LIMITS = (
    ("Max handoffs", sc.REJECTED_MAX_HANDOFFS),
    ("Max iterations", sc.REJECTED_MAX_ITERATIONS),
    ("Execution timed out", sc.REJECTED_EXECUTION_TIMEOUT),
    ("Repetitive handoff", sc.REJECTED_REPETITIVE_HANDOFF),
)
_KEPT_STARTS = 1024  # handoff tool calls started in a model's output whose tool has not ended

# the handoff whose new agent's model call runs in this task, until its first output
AWAITING: ContextVar[tuple[Run, Handoff] | None] = ContextVar("otel_handoff_strands_awaiting", default=None)


@dataclass
class SwarmTelemetry(HandoffTelemetry):
    """What the wrappers share, built once at ``instrument()``, and what is in flight."""

    swarm_type: type | None = None
    sessions: Conversations = field(init=False)  # per session id: counted on across runs
    runs: dict[int, Run] = field(default_factory=dict)  # by id(swarm), from its first node to its end
    # by id(swarm), from its run's start to its first node: the swarm, weakly, and whether it resumes
    starting: dict[int, tuple[weakref.ref[Any], bool]] = field(default_factory=dict)
    agents: dict[int, tuple[Run, str]] = field(default_factory=dict)  # id(agent) -> its run and node
    tool_starts: dict[str, int] = field(default_factory=dict)  # toolUseId -> when it started
    awaiting: int = 0  # handoffs whose new agent's model call started, until its first output
    interrupts: bool = False  # the release's swarms interrupt and resume (strands-agents 1.20 and later)

    def __post_init__(self) -> None:
        self.sessions = Conversations(self)


@dataclass(slots=True, eq=False)
class Handoff:
    """One ``handoff_to_agent`` call, as timestamps until the new agent's first output (0: not seen)."""

    tool_call_id: str
    start_ns: int  # the call started in the old agent's model output
    from_agent: str
    requested: str | None = None  # the agent_name asked for, read only to tell a bad name
    to_agent: str | None = None
    sequence: int = 0
    handler_end_ns: int = 0  # the tool's result
    drain_end_ns: int = 0  # the old node's turn ended
    setup_end_ns: int = 0  # the new agent's model call started
    drain_model_calls: int = 0
    superseded: int = 0  # other handoff calls of the same turn, not taken
    taken: bool = False  # the swarm recorded it: the turn drains, then the swarm switches
    switched: bool = False  # the old node's turn completed: the swarm switches (or stops)
    # resumed after an interrupt: the phase it resumed in; the ones before ran in the interrupted run
    resumed: str | None = None

    def phases(self, end_ns: int) -> list[PhaseRecord]:
        phases = [PhaseRecord(sc.PHASE_HANDLER, self.start_ns, self.handler_end_ns)]
        if self.taken:  # else refused by the tool, or never answered
            phases.append(PhaseRecord(sc.DRAIN, self.handler_end_ns, self.drain_end_ns))
            if self.switched:  # else the old node failed in its drain: no switch
                phases.append(PhaseRecord(sc.PHASE_SETUP, self.drain_end_ns, self.setup_end_ns))
                if self.setup_end_ns:
                    phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, self.setup_end_ns, end_ns))
        if self.resumed is not None:  # those before it ran in the interrupted run
            names = [phase.name for phase in phases]
            if self.resumed in names:
                del phases[: names.index(self.resumed)]
        return phases


class Run:
    """One run of a swarm (``stream_async``, and so ``invoke_async`` and ``__call__``): its handoffs
    from the tool call to the new agent's first output."""

    __slots__ = (
        "agents",
        "conversation",
        "node_event",
        "parent",
        "resumed_ns",
        "resuming",
        "swarm",
        "switching",
        "taken",
        "telemetry",
    )

    def __init__(
        self, telemetry: SwarmTelemetry, swarm: Any, conversation: Conversation, resuming: bool = False
    ) -> None:
        self.telemetry = telemetry
        self.swarm = swarm
        self.conversation = conversation
        self.parent: otel_context.Context | None = None  # Strands' invoke_swarm (or the app's span)
        self.taken: Handoff | None = None  # the handoff the running turn recorded: its drain
        self.switching: Handoff | None = None  # switched (or about to), until the new agent's output
        self.node_event: Any = None  # the last BeforeNodeCallEvent, which a callback may cancel
        self.agents: list[int] = []  # ids of its nodes' agents that ran, in telemetry.agents
        self.resuming = resuming  # the app resumes an interrupted run: until its first node starts
        self.resumed_ns = 0  # when the interrupted node started again, until its turn ends

    # --- what the hook events say --------------------------------------------------------

    def node_starting(self, event: Any, now: int) -> None:
        if self.parent is None:  # Strands' invoke_swarm is current here (or the app's span)
            self.parent = otel_context.get_current()
        self.node_event = event  # its callbacks may cancel the node: read when the run ends
        if self.resuming:
            self.resuming = False
            self.resumed_ns = now
            self._resume(event.node_id, now)

    def _resume(self, node: str, now: int) -> None:
        """The interrupted node ``node`` starts again: the handoff the interrupted run left in flight
        goes on here, as read off the swarm's state (Strands keeps it, and restores it from a
        session); nothing of ours was kept. Interrupted before the handoff tool ran, there is
        none yet: the tool runs now (``tool_ended``)."""
        state = self.swarm.state
        target = getattr(getattr(state, "handoff_node", None), "node_id", None)
        if target is not None:  # interrupted after the handoff tool: the old node's turn goes on
            handoff = Handoff("", now, node, to_agent=target, taken=True)  # its call's id: at its end
            handoff.handler_end_ns = now
            handoff.resumed = sc.DRAIN
            self.taken = handoff
        else:
            history = getattr(state, "node_history", None) or []
            previous = getattr(history[-1], "node_id", None) if history else None
            if previous is None or previous == node or _status(state, node) == "interrupted":
                return  # the first node, or one interrupted in its own turn: no switch into it pending
            # the swarm switched to it and was interrupted before running it (a BeforeNodeCall hook)
            handoff = Handoff(
                _last_call_id(self.swarm, previous), now, previous, to_agent=node, taken=True, switched=True
            )
            handoff.handler_end_ns = handoff.drain_end_ns = now
            handoff.resumed = sc.PHASE_SETUP
            self.switching = handoff
        handoff.sequence = self.conversation.next_sequence()

    def node_ended(self, node: str, now: int) -> None:
        results = getattr(getattr(self.swarm, "state", None), "results", None) or {}
        result = results.get(node)
        status = getattr(getattr(result, "status", None), "value", None)
        if status == "interrupted":  # no release fires it for an interrupted node: the run's end drops it
            return
        self.resumed_ns = 0  # the resumed node's turn is over: the calls after it are this run's
        switching = self.switching
        if switching is not None and node == switching.to_agent:
            # its node ended before its model streamed: it failed, or its model does not stream
            # (cancelled, or timed out: the run's end says)
            if switching.setup_end_ns and status in ("failed", "completed"):
                self._settle(switching)
                if status == "failed":
                    self._emit(switching, now, sc.OUTCOME_ERROR, error=_error_of(result))
                else:
                    self._emit(switching, now, sc.OUTCOME_COMPLETED)
            if self.taken is None:
                return
        taken, self.taken = self.taken, None
        if taken is None:
            return
        taken.drain_end_ns = now
        if not taken.tool_call_id:  # resumed: the call is in its messages, restored from a session too
            taken.tool_call_id = _last_call_id(self.swarm, node)
        if status == "completed":
            taken.switched = True
            self.switching = taken
        elif status == "failed":  # the old node raised in its drain: Strands rolls the handoff back
            self._emit(taken, now, sc.OUTCOME_ERROR, error=_error_of(result))
        else:  # no result of its turn: its node timed out (Strands rolls the handoff back)
            self._emit(taken, now, sc.OUTCOME_ERROR, error=sc.ERROR_TIMEOUT)

    def model_starting(self, node: str, now: int) -> None:
        taken = self.taken
        if taken is not None and node == taken.from_agent:
            taken.drain_model_calls += 1
            return
        switching = self.switching
        if switching is not None and node == switching.to_agent and not switching.setup_end_ns:
            switching.setup_end_ns = now
            AWAITING.set((self, switching))
            self.telemetry.awaiting += 1

    def tool_ended(self, node: str, tool_use: Any, result: Any, now: int) -> None:
        call_id = tool_use.get("toolUseId") or ""
        requested = (tool_use.get("input") or {}).get("agent_name")
        start = self.telemetry.tool_starts.pop(call_id, 0)  # in the model's output, if it streamed
        handoff = Handoff(call_id, start or now, node, requested if isinstance(requested, str) else None)
        if start < self.resumed_ns:  # in the interrupted run's output: its tool runs now, resumed
            handoff.start_ns, handoff.resumed = self.resumed_ns, sc.PHASE_HANDLER
        handoff.handler_end_ns = now
        if (result or {}).get("status") != "success":
            handoff.sequence = self.conversation.next_sequence()
            nodes = getattr(self.swarm, "nodes", None) or {}
            if handoff.requested in nodes:  # a known agent: the tool itself failed
                handoff.to_agent = handoff.requested
                self._emit(handoff, now, sc.OUTCOME_ERROR, error=sc.ERROR_HANDOFF_TOOL)
            else:
                self._emit(handoff, now, sc.OUTCOME_REJECTED, reason=sc.REJECTED_UNKNOWN_AGENT)
            return
        target = getattr(getattr(getattr(self.swarm, "state", None), "handoff_node", None), "node_id", None)
        if target is None:
            return  # the swarm ignored it (its run was over)
        previous = self.taken
        handoff.to_agent = target
        handoff.taken = True
        if previous is not None:  # the last call recorded wins (Strands' own rule); the others counted
            handoff.superseded = previous.superseded + 1
            handoff.sequence = previous.sequence
        else:
            handoff.sequence = self.conversation.next_sequence()
        self.taken = handoff

    def spoke(self, handoff: Handoff, now: int) -> None:
        """The new agent's first output."""
        if self.switching is handoff:
            self._settle(handoff)
            self._emit(handoff, now, sc.OUTCOME_COMPLETED)

    def end(self, now: int) -> None:
        """The run is over (its result, an exception, the app closing the stream): what is open ends."""
        status = _status_of(self.swarm)
        if status == "interrupted":
            self._interrupted(now)
            return
        switching, taken = self.switching, self.taken
        self.taken = None
        if switching is not None:
            self._settle(switching)
            failed = self._failure(switching.to_agent)
            if status == "executing":  # cancelled, or the app closed the stream
                self._emit(switching, now, sc.OUTCOME_ERROR, error=sc.ERROR_CANCELLED)
            elif switching.setup_end_ns:  # the new agent ran and failed (or timed out) before it spoke
                self._emit(switching, now, sc.OUTCOME_ERROR, error=failed or sc.ERROR_TIMEOUT)
            else:  # the swarm stopped before running it
                self._emit(switching, now, sc.OUTCOME_REJECTED, reason=self._why_not_run())
        if taken is not None:  # the old node's turn never ended: it failed, or the run was cancelled
            taken.drain_end_ns = now
            # no result of its turn in a failed run: its node timed out (before 1.2x no AfterNodeCall)
            stopped = sc.ERROR_CANCELLED if status == "executing" else sc.ERROR_TIMEOUT
            self._emit(taken, now, sc.OUTCOME_ERROR, error=self._failure(taken.from_agent) or stopped)
        self.conversation.run_ended()

    def _interrupted(self, now: int) -> None:
        """The run ended interrupted: what is in flight goes on in the run that resumes it (which
        reads it off the swarm's state), or never; nothing of it is recorded or kept here. But a
        new agent whose model call ran answered before it was interrupted (only its tools can be):
        its handoff completed, seen here where its stream is not (up to 1.2x), as at a node's end."""
        switching, taken = self.switching, self.taken
        self.taken = None
        if switching is not None:
            self._settle(switching)
            if switching.setup_end_ns:
                self._emit(switching, now, sc.OUTCOME_COMPLETED)
        if taken is not None:
            self.conversation.withdraw(taken.sequence)
        if switching is not None and not switching.setup_end_ns:
            self.conversation.withdraw(switching.sequence)
        # a handoff call in the interrupted node's output whose tool did not run: it runs on resume
        node = getattr(getattr(self.swarm, "state", None), "current_node", None)
        messages = getattr(getattr(node, "executor", None), "messages", None) or [{}]
        for block in messages[-1].get("content") or ():
            call_id = (block.get("toolUse") or {}).get("toolUseId")
            if call_id is not None:
                self.telemetry.tool_starts.pop(call_id, None)
        self.conversation.run_ended()

    # --- records ---------------------------------------------------------------------------

    def _settle(self, handoff: Handoff) -> None:
        """Out of flight: no longer awaited by a model stream."""
        self.switching = None
        if handoff.setup_end_ns:
            self.telemetry.awaiting -= 1
            awaited = AWAITING.get()
            if awaited is not None and awaited[1] is handoff:
                AWAITING.set(None)

    def _failure(self, node: str | None) -> BaseException | None:
        """The exception ``node`` failed with in this run, if it did (releases before 1.2x fire no
        AfterNodeCall for a failed node)."""
        results = getattr(getattr(self.swarm, "state", None), "results", None) or {}
        result = results.get(node)
        if getattr(getattr(result, "status", None), "value", None) != "failed":
            return None
        error = getattr(result, "result", None)
        return error if isinstance(error, BaseException) else None

    def _why_not_run(self) -> str:
        """Which of the swarm's stops kept the target from running (its own check, asked again)."""
        if getattr(self.node_event, "cancel_node", None):
            return sc.REJECTED_NODE_CANCELLED
        swarm = self.swarm
        try:
            _, reason = swarm.state.should_continue(
                max_handoffs=swarm.max_handoffs,
                max_iterations=swarm.max_iterations,
                execution_timeout=swarm.execution_timeout,
                repetitive_handoff_detection_window=swarm.repetitive_handoff_detection_window,
                repetitive_handoff_min_unique_agents=swarm.repetitive_handoff_min_unique_agents,
            )
        except (AttributeError, TypeError):
            return sc.REJECTED_TARGET_NOT_RUN
        return next(
            (code for prefix, code in _LIMITS if reason.startswith(prefix)), sc.REJECTED_TARGET_NOT_RUN
        )

    def _emit(
        self,
        handoff: Handoff,
        end_ns: int,
        outcome: str,
        *,
        error: BaseException | str | None = None,
        reason: str | None = None,
    ) -> None:
        if not handoff.sequence:
            handoff.sequence = self.conversation.next_sequence()
        end_ns = max(end_ns, handoff.start_ns)
        attributes: dict[str, Any] = {sc.DRAIN_MODEL_CALLS: handoff.drain_model_calls}
        if handoff.resumed is not None:
            attributes[sc.INTERRUPTED] = True
        if handoff.superseded:
            attributes[sc.SUPERSEDED_COUNT] = handoff.superseded
        if reason is not None:
            attributes[sc.REJECTION_REASON] = reason
        self.conversation.emit(
            start_ns=handoff.start_ns,
            end_ns=end_ns,
            parent=self.parent if self.parent is not None else otel_context.get_current(),
            sequence=handoff.sequence,
            outcome=outcome,
            from_agent=handoff.from_agent,
            to_agent=handoff.to_agent,
            trigger=sc.TRIGGER_TOOL,
            tool_name=TOOL_NAME,
            tool_call_id=handoff.tool_call_id or None,
            error=error,
            attributes=attributes,
            phases=handoff.phases(end_ns),
            duration=(end_ns - handoff.start_ns) / 1e9,
        )


def _error_of(result: Any) -> BaseException | str:
    error = getattr(result, "result", None)
    return error if isinstance(error, BaseException) else sc.OUTCOME_ERROR


def _status(state: Any, node: str) -> str | None:
    """The status of ``node``'s last result in the swarm's state, if it has one."""
    result = (getattr(state, "results", None) or {}).get(node)
    return getattr(getattr(result, "status", None), "value", None)


def _last_call_id(swarm: Any, node: str) -> str:
    """The id of the last ``handoff_to_agent`` call in ``node``'s agent's messages (a resumed
    handoff's, made in the interrupted run): ids and tool names are all that is read."""
    messages = getattr(
        getattr((getattr(swarm, "nodes", None) or {}).get(node), "executor", None), "messages", None
    )
    for message in reversed(messages or ()):
        for block in reversed(message.get("content") or ()):
            tool_use = block.get("toolUse")
            if tool_use is not None and tool_use.get("name") == TOOL_NAME:
                return tool_use.get("toolUseId") or ""
    return ""


def conversation_of(telemetry: SwarmTelemetry, swarm: Any) -> Conversation:
    """The run's conversation: the session manager's, counted on across runs, when the app gave one."""
    session_id = getattr(getattr(swarm, "session_manager", None), "session_id", None)
    if not isinstance(session_id, str) or not session_id:
        session_id = None
    return telemetry.sessions.get(session_id, session_id, time.time_ns())


# --- what each hook event does (by its class's name: the multi-agent events moved modules) --------


def _swarm_started(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    swarm = getattr(event, "source", None)
    if telemetry.swarm_type is None or not isinstance(swarm, telemetry.swarm_type):
        return  # a Graph: no handoffs
    # still the interrupted run's status here: this run resumes it (in this process or restored)
    resuming = telemetry.interrupts and _status_of(swarm) == "interrupted"
    # only a weak note until its first node, inside the run's try (its end is sure to come then):
    # a run that raises before (a resume with answers to no interrupt) keeps nothing, nor the swarm
    key, starting = id(swarm), telemetry.starting
    starting[key] = (weakref.ref(swarm, lambda _, key=key: starting.pop(key, None)), resuming)


def _status_of(swarm: Any) -> str | None:
    return getattr(getattr(getattr(swarm, "state", None), "completion_status", None), "value", None)


def _swarm_ended(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    swarm = getattr(event, "source", None)
    telemetry.starting.pop(id(swarm), None)  # no node ran
    run = telemetry.runs.pop(id(swarm), None)
    if run is None:
        return
    for agent in run.agents:
        telemetry.agents.pop(agent, None)
    run.end(time.time_ns())


def _node_starting(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    swarm = getattr(event, "source", None)
    run = telemetry.runs.get(id(swarm))
    if run is None:
        note = telemetry.starting.pop(id(swarm), None)
        if note is not None and note[0]() is swarm:  # its first node: the run is on
            run = Run(telemetry, swarm, conversation_of(telemetry, swarm), note[1])
            telemetry.runs[id(swarm)] = run
    if run is not None:
        run.node_starting(event, start_ns)
        agent = id(getattr(swarm.nodes.get(event.node_id), "executor", None))
        if agent not in telemetry.agents:  # the agent of a node, once it runs: its model and tool calls
            telemetry.agents[agent] = (run, event.node_id)
            run.agents.append(agent)


def _node_ended(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    run = telemetry.runs.get(id(getattr(event, "source", None)))
    if run is not None:
        run.node_ended(event.node_id, start_ns)  # before the AfterNodeCall hooks: they are the switch's


def _model_starting(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    found = telemetry.agents.get(id(event.agent))
    if found is not None:
        found[0].model_starting(found[1], start_ns)


def _tool_ended(telemetry: SwarmTelemetry, event: Any, start_ns: int) -> None:
    tool_use = event.tool_use
    if tool_use.get("name") != TOOL_NAME:
        return
    found = telemetry.agents.get(id(event.agent))
    if found is not None:
        found[0].tool_ended(found[1], tool_use, event.result, start_ns)


# hook event class name -> what it does when Strands makes one (it dispatches it at once)
HANDLERS = {
    "BeforeMultiAgentInvocationEvent": _swarm_started,
    "AfterMultiAgentInvocationEvent": _swarm_ended,
    "BeforeNodeCallEvent": _node_starting,
    "AfterNodeCallEvent": _node_ended,
    "BeforeModelCallEvent": _model_starting,
    "AfterToolCallEvent": _tool_ended,
}


def event_classes(modules: list[Any]) -> dict[str, type]:
    """Each event class of ``HANDLERS`` found in ``modules``, by name."""
    found: dict[str, type] = {}
    for module in modules:
        for name in HANDLERS:
            cls = getattr(module, name, None)
            if isinstance(cls, type) and name not in found:
                found[name] = cls
    return found


def wrap_event(telemetry: SwarmTelemetry, name: str) -> Any:
    """A hook event's ``__init__``: Strands makes each event where it dispatches it, so what it says
    is read here, with nothing on the events we do not read (messages added, invocations, tool
    batches) nor on the dispatch of the app's callbacks. What a callback sets later (a node's
    ``cancel_node``) is read from the event when it matters."""
    handler = HANDLERS[name]

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        wrapped(*args, **kwargs)
        if telemetry.enabled:
            try:
                handler(telemetry, instance, time.time_ns())
            except Exception as exc:  # a fault of ours costs this handoff's trace, never the run
                report(f"a Strands {name}", exc)

    return wrapper


def wrap_block_start(telemetry: SwarmTelemetry) -> Any:
    """``handle_content_block_start``: when a ``handoff_to_agent`` call starts in the model's output."""

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        tool_use = wrapped(*args, **kwargs)
        if tool_use and tool_use.get("name") == TOOL_NAME and telemetry.enabled:
            starts = telemetry.tool_starts
            if len(starts) >= _KEPT_STARTS:
                starts.clear()
            starts[tool_use.get("toolUseId") or ""] = time.time_ns()
        return tool_use

    return wrapper


def wrap_message_start(telemetry: SwarmTelemetry) -> Any:
    """``handle_message_start``: the model starts streaming; the new agent's first output if a
    handoff awaits it in this task."""

    def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if telemetry.awaiting:
            awaited = AWAITING.get()
            if awaited is not None:
                try:
                    awaited[0].spoke(awaited[1], time.time_ns())
                except Exception as exc:
                    report("a Strands model stream's start", exc)
        return wrapped(*args, **kwargs)

    return wrapper
