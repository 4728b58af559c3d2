"""Microsoft Agent Framework handoffs as records, and the wrappers that observe them.

A ``HandoffBuilder`` workflow gives each agent one ``handoff_to_<target>`` tool per target. From the
end of the model call that returns the call, the tool loop hands it to the orchestration's function
middleware (``_AutoHandoffMiddleware``), which records it and stops the loop (``handler``); the old
agent's run ends, the executor cleans the conversation, broadcasts it, picks the handoff taken
(``_is_handoff_requested``) and sends it to the target with the ``handoff_sent`` event
(``context_update``); the runner ends the superstep, writes a checkpoint when checkpointing is on,
and delivers the messages in the next one (``dispatch``); the target's executor builds its agent's
input until its model call starts (``setup``), whose first output ends the handoff
(``first_output``).

What runs where, and what it costs between handoffs:

- ``Workflow.run``, once per run: the workflow's conversation (handoff workflows only) and the
  run's end (a cleanup hook on the run's stream);
- ``HandoffAgentExecutor._run_agent_and_emit`` and ``_is_handoff_requested``, once per agent
  run (the latter also reads the run's response, its messages' contents once, for handoff calls
  the framework answered "function not found": ``agent_handoff.unreachable_calls``);
  ``_AutoHandoffMiddleware.process``, once per tool call of a handoff agent;
- ``InProcRunnerContext.create_checkpoint``, once per checkpoint written (checkpointing on);
- ``BaseChatClient.get_response``, per model call of a handoff agent: its end (a cleanup hook on
  its stream, or its awaitable awaited), where a handoff call it returns starts;
- ``WorkflowContext.yield_output``, per streamed update: one test of an integer while no handoff
  awaits its first output.
"""

from __future__ import annotations

import re
import time
import weakref
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.emit import count_unreachable
from ..core.faults import report
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

# get_handoff_tool_name's form: the name a model asking for a handoff calls
_HANDOFF_TOOL_PREFIX = "handoff_to_"
# the framework's answer to a call of a tool the agent lacks (its function result, or with
# terminate_on_unknown_calls the KeyError the run raises), the same text in every release traced
_NOT_FOUND = re.compile(r'Error: Requested function "(.*)" not found\.')
_KEPT_CHECKPOINTS = 4096  # checkpoints (the last of each run) whose conversation a resumed run continues

# the agent run (an executor's _run_agent_and_emit) in this task: its handoff tool calls
TURN: ContextVar[Turn | None] = ContextVar("otel_handoff_agent_framework_turn", default=None)
# the handoff whose target's agent runs in this task, until its first output
AWAITED: ContextVar[Handoff | None] = ContextVar("otel_handoff_agent_framework_awaited", default=None)


@dataclass
class WorkflowTelemetry(HandoffTelemetry):
    """What the wrappers share, built once at ``instrument()``, and the workflows in flight."""

    executor_type: type = object  # HandoffAgentExecutor: a workflow with one is a handoff workflow
    executor_span: str = "executor.process"  # the framework's executor span (its parent: workflow.run)
    conversation_id: ContextVar[str | None] | None = None  # what the framework puts on workflow.run
    flows: weakref.WeakKeyDictionary[Any, Flow] = field(default_factory=weakref.WeakKeyDictionary)
    executors: weakref.WeakKeyDictionary[Any, Flow] = field(default_factory=weakref.WeakKeyDictionary)
    # a workflow's runner context (where checkpoints are written) -> its flow
    contexts: weakref.WeakKeyDictionary[Any, Flow] = field(default_factory=weakref.WeakKeyDictionary)
    checkpoints: OrderedDict[str, Conversation] = field(default_factory=OrderedDict)
    awaiting: int = 0  # target agents running until their first output


@dataclass(slots=True, eq=False)
class Call:
    """One ``handoff_to_<target>`` call the middleware took."""

    tool_name: str
    call_id: str | None
    start_ns: int  # the model call that returned it ended (the middleware's start, if not seen)
    end_ns: int = 0


@dataclass(slots=True, eq=False)
class Handoff:
    """The handoff an agent run took, as timestamps until the target's first output (0: not yet)."""

    flow: Flow
    call: Call
    from_agent: str
    to_agent: str
    sequence: int
    parent: otel_context.Context
    conversation_id: str | None
    superseded: int = 0  # other handoff calls of the same response, not taken
    sent_ns: int = 0  # handoff_sent: the old agent's executor returned
    dispatched_ns: int = 0  # the target's executor started its agent run
    setup_end_ns: int = 0  # its model call started
    checkpoint_writes: int = 0
    counted: bool = False  # in telemetry.awaiting: its target runs, its first output not yet seen
    done: bool = False

    def phases(self, end_ns: int) -> list[PhaseRecord]:
        call = self.call
        phases = [PhaseRecord(sc.PHASE_HANDLER, call.start_ns, call.end_ns)]
        steps = (
            (sc.PHASE_CONTEXT_UPDATE, call.end_ns, self.sent_ns),
            (sc.PHASE_DISPATCH, self.sent_ns, self.dispatched_ns),
            (sc.PHASE_SETUP, self.dispatched_ns, self.setup_end_ns),
            (sc.PHASE_FIRST_OUTPUT, self.setup_end_ns, end_ns),
        )
        for name, start, end in steps:
            if not start:
                break
            phases.append(PhaseRecord(name, start, end))
        return phases

    def emit(
        self,
        end_ns: int,
        outcome: str,
        *,
        error: BaseException | str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.done:
            return
        self.done = True
        self.uncount()
        start_ns = self.call.start_ns
        end_ns = max(end_ns, start_ns)
        attributes: dict[str, Any] = {}
        if self.checkpoint_writes:
            attributes[sc.CHECKPOINT_WRITES] = self.checkpoint_writes
        if self.superseded:
            attributes[sc.SUPERSEDED_COUNT] = self.superseded
        if reason is not None:
            attributes[sc.REJECTION_REASON] = reason
        self.flow.conversation.emit(
            start_ns=start_ns,
            end_ns=end_ns,
            parent=self.parent,
            sequence=self.sequence,
            outcome=outcome,
            from_agent=self.from_agent,
            to_agent=self.to_agent,
            trigger=sc.TRIGGER_TOOL,
            tool_name=self.call.tool_name,
            tool_call_id=self.call.call_id,
            conversation_id=self.conversation_id,
            error=error,
            attributes=attributes,
            phases=self.phases(end_ns),
            duration=(end_ns - start_ns) / 1e9,
        )

    def uncount(self) -> None:
        """No longer awaited: the per-update test goes back to one integer."""
        if self.counted:
            self.counted = False
            telemetry: WorkflowTelemetry = self.flow.conversation.telemetry  # type: ignore[assignment]
            telemetry.awaiting -= 1

    def spoke(self, now: int) -> None:
        """The target's first output: its first streamed update, or its first model call's end."""
        if not self.done:
            self.emit(now, sc.OUTCOME_COMPLETED)


class Flow:
    """One workflow instance, across its runs: its conversation and the handoffs sent whose target
    has not started yet (by target id)."""

    __slots__ = ("__weakref__", "conversation", "last_checkpoint", "parent", "sent")

    def __init__(self, conversation: Conversation, parent: otel_context.Context) -> None:
        self.conversation = conversation
        self.parent = parent  # where the app ran the workflow: the parent without the framework's spans
        self.sent: dict[str, Handoff] = {}
        self.last_checkpoint: str | None = None

    def ended(self) -> None:
        """The run is over: a handoff whose target never started was not run (the run stopped first)."""
        sent, self.sent = self.sent, {}
        now = time.time_ns()
        for handoff in sent.values():
            handoff.emit(now, sc.OUTCOME_REJECTED, reason=sc.REJECTED_TARGET_NOT_RUN)
        checkpoint = self.last_checkpoint
        if checkpoint is not None:  # a run resumed from it goes on counting here
            telemetry: WorkflowTelemetry = self.conversation.telemetry  # type: ignore[assignment]
            kept = telemetry.checkpoints
            kept[checkpoint] = self.conversation
            kept.move_to_end(checkpoint)
            if len(kept) > _KEPT_CHECKPOINTS:
                kept.popitem(last=False)
        self.conversation.run_ended()


class Turn:
    """One agent run of a handoff executor: the handoff calls its middleware took, the one taken."""

    __slots__ = ("calls", "flow", "model_end_ns", "parent", "source", "taken")

    def __init__(self, flow: Flow, source: str, parent: otel_context.Context) -> None:
        self.flow = flow
        self.source = source
        self.parent = parent
        self.calls: list[Call] = []
        self.taken: Handoff | None = None
        self.model_end_ns = 0  # its last model call's end: a handoff call it returned starts there

    def model_ended(self) -> None:
        self.model_end_ns = time.time_ns()

    def requested(self, telemetry: WorkflowTelemetry, target: str, message: Any) -> None:
        """``_is_handoff_requested`` found the handoff taken: the call whose result ends the response."""
        calls = self.calls
        if not calls:
            return
        ids = {getattr(c, "call_id", None) for c in getattr(message, "contents", None) or ()}
        taken = next((c for c in reversed(calls) if c.call_id in ids), calls[-1])
        conversation_id = telemetry.conversation_id.get() if telemetry.conversation_id else None
        self.taken = Handoff(
            self.flow,
            taken,
            self.source,
            target,
            self.flow.conversation.next_sequence(),
            self.parent,
            conversation_id if isinstance(conversation_id, str) and conversation_id else None,
            superseded=len(calls) - 1,
        )


def _parent(telemetry: WorkflowTelemetry, flow: Flow) -> otel_context.Context:
    """The framework's ``workflow.run`` when its executor span is current (its parent), else the
    span current in the executor (the app's, copied into the runner's tasks), else where the app
    ran the workflow."""
    span = trace.get_current_span()
    parent = getattr(span, "parent", None)
    if parent is not None and getattr(span, "name", None) == telemetry.executor_span:
        return trace.set_span_in_context(trace.NonRecordingSpan(parent), otel_context.Context())
    if span.get_span_context().is_valid:
        return otel_context.get_current()
    return flow.parent


# --- the run -----------------------------------------------------------------------------------


def wrap_run(telemetry: WorkflowTelemetry) -> Any:
    """``Workflow.run`` of a handoff workflow: its flow (its conversation, and the one a resumed
    checkpoint continues); the run's end, a cleanup hook on the run's stream, which the framework
    runs when the stream is consumed or closed, streamed or awaited. Other workflows pass by."""

    def run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        result = wrapped(*args, **kwargs)
        if not telemetry.enabled:
            return result
        try:
            flow = _start(telemetry, instance, kwargs.get("checkpoint_id"))
            if flow is None:
                return result
            stream = result if kwargs.get("stream") else _stream_of(instance)
            if stream is not None:
                stream.with_cleanup_hook(flow.ended)
                return result
        except Exception as exc:
            report("an Agent Framework workflow run", exc)
            return result
        return _awaited(flow, result)  # releases without the run's stream at hand (core before 1.19)

    return run


def _stream_of(workflow: Any) -> Any:
    """The stream whose final response a non-streamed run awaits (the workflow's active run)."""
    active = getattr(workflow, "_active_run", None)
    stream = active() if callable(active) else None
    return stream if hasattr(stream, "with_cleanup_hook") else None


def _start(telemetry: WorkflowTelemetry, workflow: Any, checkpoint_id: Any) -> Flow | None:
    flow = telemetry.flows.get(workflow)
    if flow is None:
        executors = list(workflow.executors.values())
        if not any(isinstance(executor, telemetry.executor_type) for executor in executors):
            return None  # not a handoff workflow
        conversation = telemetry.checkpoints.get(checkpoint_id) if isinstance(checkpoint_id, str) else None
        if conversation is None:
            conversation = Conversation(telemetry, time.time_ns(), None, None)
        flow = telemetry.flows[workflow] = Flow(conversation, otel_context.get_current())
        for executor in executors:
            telemetry.executors[executor] = flow
        context = getattr(getattr(workflow, "_runner", None), "context", None)
        if context is not None:
            telemetry.contexts[context] = flow
    else:
        flow.parent = otel_context.get_current()
    return flow


async def _awaited(flow: Flow, result: Any) -> Any:
    try:
        return await result
    finally:
        try:
            flow.ended()
        except Exception as exc:
            report("an Agent Framework workflow run's end", exc)


# --- an agent's run: the old agent's handoff, or the target's start -------------------------------


def wrap_agent_run(telemetry: WorkflowTelemetry) -> Any:
    """``HandoffAgentExecutor._run_agent_and_emit``: a handoff's target starts here (``dispatch``
    ends); an old agent's run that took a handoff has sent it when it returns."""

    def agent_run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        flow = telemetry.executors.get(instance) if telemetry.enabled else None
        if flow is None:
            return wrapped(*args, **kwargs)
        return _agent_run(telemetry, flow, instance, wrapped, args, kwargs)

    return agent_run


async def _agent_run(
    telemetry: WorkflowTelemetry, flow: Flow, executor: Any, wrapped: Any, args: Any, kwargs: Any
) -> Any:
    source = executor.id
    awaited = flow.sent.pop(source, None)
    turn_token = TURN.set(Turn(flow, source, _parent(telemetry, flow)))
    awaited_token = None
    if awaited is not None:
        awaited.dispatched_ns = time.time_ns()
        awaited_token = AWAITED.set(awaited)
        awaited.counted = True
        telemetry.awaiting += 1
    try:
        result = await wrapped(*args, **kwargs)
    except BaseException as exc:
        _failed(TURN.get(), awaited, exc)
        if not isinstance(turn_token.old_value, Turn):  # an autonomous turn's nested run: counted once
            _refused_raised(telemetry, source, exc)
        raise
    finally:
        turn = TURN.get()
        TURN.reset(turn_token)
        if awaited is not None:
            AWAITED.reset(awaited_token)  # type: ignore[arg-type]
            awaited.uncount()
    try:
        _returned(flow, turn, awaited)
    except Exception as exc:
        report("an Agent Framework agent run", exc)
    return result


def _returned(flow: Flow, turn: Turn | None, awaited: Handoff | None) -> None:
    now = time.time_ns()
    if awaited is not None and not awaited.done:
        if awaited.setup_end_ns:  # its model ran, and the run ended before an output of ours
            awaited.spoke(now)
        else:  # the termination condition held before its agent ran
            awaited.emit(now, sc.OUTCOME_REJECTED, reason=sc.REJECTED_TARGET_NOT_RUN)
    taken = turn.taken if turn is not None else None
    if taken is not None:  # send_message and handoff_sent are the executor's last steps
        taken.sent_ns = now
        previous = flow.sent.get(taken.to_agent)
        if previous is not None:
            previous.emit(now, sc.OUTCOME_REJECTED, reason=sc.REJECTED_TARGET_NOT_RUN)
        flow.sent[taken.to_agent] = taken


def _failed(turn: Turn | None, awaited: Handoff | None, exc: BaseException) -> None:
    """The agent run raised (or was cancelled): the handoff it awaited, or took, ends with it."""
    try:
        import asyncio

        error: BaseException | str = sc.ERROR_CANCELLED if isinstance(exc, asyncio.CancelledError) else exc
        now = time.time_ns()
        if awaited is not None:
            awaited.emit(now, sc.OUTCOME_ERROR, error=error)
        if turn is not None and turn.taken is not None:
            turn.taken.emit(now, sc.OUTCOME_ERROR, error=error)
    except Exception as fault:
        report("an Agent Framework agent run's failure", fault)


def _refused_raised(telemetry: WorkflowTelemetry, source: str, exc: BaseException) -> None:
    """With ``terminate_on_unknown_calls`` the framework raises on a call of a tool the agent lacks
    (naming the first): a handoff call so refused is counted; the exception goes on untouched."""
    if not (isinstance(exc, KeyError) and telemetry.enabled and telemetry.metrics.enabled):
        return
    try:
        message = exc.args[0] if exc.args else None
        found = _NOT_FOUND.fullmatch(message) if isinstance(message, str) else None
        if found is not None and found[1].startswith(_HANDOFF_TOOL_PREFIX):
            count_unreachable(telemetry, source)
    except Exception as fault:
        report("an Agent Framework refused handoff call", fault)


def unreachable_calls(response: Any) -> int:
    """The run's ``handoff_to_<target>`` calls the framework answered "function not found": a
    target this agent may not reach (it has no such tool), so no handoff. One pass over the
    response's contents (streamed text is one content by now), once per agent run."""
    asked: dict[Any, str] | None = None
    refused = 0
    for message in getattr(response, "messages", None) or ():
        for content in message.contents:
            kind = content.type
            if kind == "function_call":
                name = content.name
                if isinstance(name, str) and name.startswith(_HANDOFF_TOOL_PREFIX):
                    if asked is None:
                        asked = {}
                    asked[content.call_id] = name
            elif kind == "function_result" and asked:
                name = asked.pop(content.call_id, None)
                result = content.result
                if name is not None and isinstance(result, str):
                    found = _NOT_FOUND.fullmatch(result)
                    refused += found is not None and found[1] == name
    return refused


def wrap_is_handoff_requested(telemetry: WorkflowTelemetry) -> Any:
    """``HandoffAgentExecutor._is_handoff_requested``: the handoff taken (its target, and the
    message whose function result names the call); and, from the same response, the handoff calls
    the framework refused (``agent_handoff.unreachable_calls``)."""

    def requested(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        found = wrapped(*args, **kwargs)
        if not telemetry.enabled:
            return found
        turn = TURN.get()
        if turn is None:
            return found
        if found is not None:
            try:
                turn.requested(telemetry, found[0], found[1])
            except Exception as exc:
                report("an Agent Framework handoff decision", exc)
        if telemetry.metrics.enabled:
            try:
                refused = unreachable_calls(args[0] if args else kwargs.get("response"))
                if refused:
                    count_unreachable(telemetry, turn.source, refused)
            except Exception as exc:
                report("an Agent Framework refused handoff call", exc)
        return found

    return requested


def wrap_middleware(telemetry: WorkflowTelemetry) -> Any:
    """``_AutoHandoffMiddleware.process``: a handoff tool call, recorded until the middleware ends
    the tool loop (``handler``)."""

    def process(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        turn = TURN.get() if telemetry.enabled else None
        if turn is None:
            return wrapped(*args, **kwargs)
        try:
            context = kwargs["context"] if "context" in kwargs else args[0]
            name = context.function.name
            if name not in instance._handoff_functions:
                return wrapped(*args, **kwargs)
            call_id = (getattr(context, "metadata", None) or {}).get("call_id")
            call_id = call_id if isinstance(call_id, str) and call_id else None
            call = Call(name, call_id, turn.model_end_ns or time.time_ns())
            turn.calls.append(call)
        except Exception as exc:
            report("an Agent Framework handoff tool call", exc)
            return wrapped(*args, **kwargs)
        return _handled(call, wrapped(*args, **kwargs))

    return process


async def _handled(call: Call, step: Any) -> Any:
    try:
        return await step
    finally:
        call.end_ns = time.time_ns()


# --- the superstep boundary --------------------------------------------------------------------


def wrap_checkpoint(telemetry: WorkflowTelemetry) -> Any:
    """``InProcRunnerContext.create_checkpoint``: a checkpoint written (the runner writes one at
    each superstep's end when checkpointing is on, none otherwise): counted on the handoffs in
    flight; the last of a run is where a resumed run continues the count."""

    def checkpoint(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        flow = telemetry.contexts.get(instance) if telemetry.enabled else None
        if flow is None:
            return wrapped(*args, **kwargs)
        return _checkpointed(flow, wrapped(*args, **kwargs))

    return checkpoint


async def _checkpointed(flow: Flow, step: Any) -> Any:
    checkpoint_id = await step
    if isinstance(checkpoint_id, str):
        flow.last_checkpoint = checkpoint_id
        for handoff in flow.sent.values():
            handoff.checkpoint_writes += 1
    return checkpoint_id


# --- the target's model call and first output ----------------------------------------------------


def wrap_get_response(telemetry: WorkflowTelemetry) -> Any:
    """``BaseChatClient.get_response``, per model call of a handoff agent: its end is where a
    handoff call it returns starts (the span's start); the awaited target's first model call ends
    ``setup``, and not streamed, its end is the first output."""

    def get_response(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        turn = TURN.get()
        if turn is None:
            return wrapped(*args, **kwargs)
        handoff = AWAITED.get() if telemetry.awaiting else None
        if handoff is not None and not handoff.setup_end_ns and not handoff.done:
            handoff.setup_end_ns = time.time_ns()
        else:
            handoff = None
        result = wrapped(*args, **kwargs)
        if kwargs.get("stream"):  # consumed by the tool loop, then its cleanup hooks run
            add_hook = getattr(result, "with_cleanup_hook", None)
            if add_hook is not None:
                add_hook(turn.model_ended)
            return result  # the target's first update reaches the workflow's output: yield_output
        return _model_call(turn, handoff, result)

    return get_response


async def _model_call(turn: Turn, handoff: Handoff | None, step: Any) -> Any:
    result = await step
    now = time.time_ns()
    turn.model_end_ns = now
    if handoff is not None:
        try:
            handoff.spoke(now)
        except Exception as exc:
            report("an Agent Framework model call's end", exc)
    return result


def wrap_yield_output(telemetry: WorkflowTelemetry) -> Any:
    """``WorkflowContext.yield_output``, per output: the awaited target's first streamed update."""

    def yield_output(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if telemetry.awaiting:
            handoff = AWAITED.get()
            if handoff is not None and handoff.setup_end_ns and not handoff.done:
                try:
                    handoff.spoke(time.time_ns())
                except Exception as exc:
                    report("an Agent Framework output", exc)
        return wrapped(*args, **kwargs)

    return yield_output
