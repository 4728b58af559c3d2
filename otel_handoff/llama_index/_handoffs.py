"""LlamaIndex ``AgentWorkflow`` handoffs as records, and the wrappers that observe them.

The old agent's model answers with a call of the workflow's one ``handoff`` tool
(``return_direct``: no drain); ``call_tool`` runs it (``handler``), ``aggregate_tool_results``
puts the results into memory, switches ``current_agent_name``, finalizes the old agent and reads
the history for the new one (``context_update``); ``setup_agent`` and ``run_agent_step`` bring the
new agent to its model call (``setup``), whose first streamed chunk (or its end) ends the handoff
(``first_output``). A target the tool refuses (unknown, or not in ``can_handoff_to``) is no error
in LlamaIndex: the same agent is asked again; that is a ``rejected`` handoff, its span running
to the first output of that extra model call.

Each wrapped step is called per agent step or tool call, never per token or event: between
handoffs a wrapper tests the tool's name or one dictionary and returns. The new agent's model
call is seen through LlamaIndex's own LLM chat events: a handler of ours sits on the LLM
callbacks' dispatcher (``llama_index.core.llms.callbacks``, never the root one, where the app's
handlers are) only while a step awaits a handoff's first output.
"""

from __future__ import annotations

import threading
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.conversation import Conversation, Conversations
from ..core.faults import report
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

HANDOFF_TOOL = "handoff"  # AgentWorkflow's built-in tool, one for every target
# the handoff whose new agent's model call the current step awaits
AWAITED: ContextVar[Handoff | None] = ContextVar("otel_handoff_llama_index_awaited", default=None)


@dataclass
class WorkflowTelemetry(HandoffTelemetry):
    """What the wrappers need, built once at ``instrument()``, and the workflows in flight."""

    memory_type: type | None = None  # llama_index.core.memory.Memory: its session_id is the conversation
    dispatcher: Any = None  # the LLM callbacks' dispatcher, where our listener goes while awaited
    listener: Any = None
    # a workflow's state store (shared by the run's context and every step's) -> its flow
    flows: weakref.WeakKeyDictionary[Any, Flow] = field(default_factory=weakref.WeakKeyDictionary)
    sessions: Conversations = field(init=False)
    listening: int = 0  # steps awaiting a first output: the listener is on while > 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sessions = Conversations(self)

    def listen(self, on: bool) -> None:
        """Put our listener on the LLM callbacks' dispatcher (or take it off), copy on write: a
        dispatch already going through the list goes on with the list it had."""
        with self.lock:
            before = self.listening
            self.listening += 1 if on else -1
            dispatcher = self.dispatcher
            if before == 0 and on:
                dispatcher.event_handlers = [*dispatcher.event_handlers, self.listener]
            elif self.listening == 0 and not on:
                dispatcher.event_handlers = [h for h in dispatcher.event_handlers if h is not self.listener]


@dataclass(slots=True, eq=False)
class Call:
    """One ``handoff`` tool call of the old agent's response."""

    tool_call_id: str | None
    target: str | None  # the tool's to_agent argument, kept only when it names an agent
    start_ns: int
    # where the tool was called, when the run has no span of the app's around it and another
    # instrumentation's span is current there (openinference's): its trace is the handoff's
    parent: otel_context.Context | None = None
    end_ns: int = 0


@dataclass(slots=True, eq=False)
class Handoff:
    """A handoff decided by ``aggregate_tool_results``, until its new agent's first output."""

    flow: Flow
    sequence: int
    from_agent: str | None
    to_agent: str | None
    awaited_agent: str  # whose model call ends it (the old agent's again when rejected)
    call: Call
    switched_ns: int  # aggregate_tool_results returned
    rejection: str | None = None
    model_start_ns: int = 0
    listening: bool = False  # our listener is on for it (until its first output or its step's end)
    done: bool = False

    def stop_listening(self) -> None:
        if self.listening:
            self.listening = False
            self.flow.conversation.telemetry.listen(False)  # type: ignore[attr-defined]

    def emit(self, end_ns: int, *, spoke: bool, error: BaseException | str | None = None) -> None:
        if self.done:
            return
        self.done = True
        call = self.call
        phases = [
            PhaseRecord(sc.PHASE_HANDLER, call.start_ns, call.end_ns),
            PhaseRecord(sc.PHASE_CONTEXT_UPDATE, call.end_ns, self.switched_ns),
            PhaseRecord(sc.PHASE_SETUP, self.switched_ns, self.model_start_ns or (0 if spoke else end_ns)),
        ]
        if self.model_start_ns:
            phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, self.model_start_ns, end_ns if spoke else 0))
        attributes: dict[str, Any] = {}
        outcome = sc.OUTCOME_COMPLETED
        if error is not None:
            outcome = sc.OUTCOME_ERROR
        elif self.rejection is not None:
            outcome = sc.OUTCOME_REJECTED
            attributes[sc.REJECTION_REASON] = self.rejection
        elif not spoke:
            attributes[sc.ENDED_BY] = sc.ENDED_BY_RUN_END
        end_ns = max(end_ns, call.start_ns)
        self.flow.conversation.emit(
            start_ns=call.start_ns,
            end_ns=end_ns,
            parent=call.parent or self.flow.parent,
            sequence=self.sequence,
            outcome=outcome,
            from_agent=self.from_agent,
            to_agent=self.to_agent,
            trigger=sc.TRIGGER_TOOL,
            tool_name=HANDOFF_TOOL,
            tool_call_id=call.tool_call_id,
            error=error,
            attributes=attributes,
            phases=phases,
            duration=(end_ns - call.start_ns) / 1e9,
        )


class Flow:
    """One workflow context (its runs, a resumed one included): the handoff calls of the current
    response, the handoff awaiting its first output, and the conversation they count in."""

    __slots__ = (
        "__weakref__",
        "agents",
        "apps_span",
        "awaited",
        "calls",
        "conversation",
        "from_agent",
        "parent",
    )

    def __init__(self, conversation: Conversation, parent: otel_context.Context, agents: Any) -> None:
        self.conversation = conversation
        self.parent = parent
        self.apps_span = bool(parent)  # an empty Context: no span of the app's around the run
        self.agents = agents  # the workflow's agents by name: is a refused target an agent?
        self.from_agent: str | None = None  # whose response asked for a handoff
        self.calls: list[Call] = []
        self.awaited: Handoff | None = None

    def decided(self, next_agent: str, now: int) -> None:
        """``aggregate_tool_results`` returned the next agent's input: the handoff taken (the
        last call naming it wins, as in LlamaIndex), or a refusal when the agent stayed."""
        calls, self.calls = self.calls, []
        if not calls:
            return
        source = self.from_agent
        if next_agent != source:
            taken = [c for c in calls if c.target == next_agent] or calls
            call, rejection, to_agent = taken[-1], None, next_agent
        else:
            call = calls[-1]
            known = call.target is not None
            rejection = sc.REJECTED_NOT_ALLOWED if known else sc.REJECTED_UNKNOWN_AGENT
            to_agent = call.target
        previous = self.awaited
        if previous is not None:  # its agent never spoke before this one: it ends here
            previous.emit(call.start_ns, spoke=False)
        self.awaited = Handoff(
            self,
            self.conversation.next_sequence(),
            source,
            to_agent,
            next_agent,
            call,
            now,
            rejection,
        )

    def ended(self, error: BaseException | str | None) -> None:
        """The run ended: a handoff still waiting ends with it."""
        handoff, self.awaited = self.awaited, None
        self.calls = []
        if handoff is not None:
            handoff.emit(time.time_ns(), spoke=False, error=error)
        self.conversation.run_ended()


def _flow(telemetry: WorkflowTelemetry, ctx: Any) -> Flow | None:
    try:
        return telemetry.flows.get(ctx.store)
    except Exception:  # a context without a store (another workflow's shape): not ours
        return None


def _ctx(args: Any, kwargs: Any) -> Any:
    return kwargs["ctx"] if "ctx" in kwargs else args[0]


def _event(args: Any, kwargs: Any) -> Any:
    return kwargs["ev"] if "ev" in kwargs else args[1]


# --- the run ----------------------------------------------------------------------------------


def wrap_run(telemetry: WorkflowTelemetry) -> Any:
    """``AgentWorkflow.run``: the run's context, conversation and parent; its end (the handler's
    future done) ends what still waits and sends the spans on their way."""

    def run(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        handler = wrapped(*args, **kwargs)
        if telemetry.enabled:
            try:
                _run_started(telemetry, instance, handler, _memory(args, kwargs))
            except Exception as exc:
                report("LlamaIndex run start", exc)
        return handler

    return run


def _memory(args: Any, kwargs: Any) -> Any:
    """The ``memory`` the app passed to ``run()`` (positionally third after ``user_msg``)."""
    memory = kwargs.get("memory")
    if memory is None and len(args) > 2 and isinstance(args[0], str):
        memory = args[2]
    if memory is None:
        memory = getattr(kwargs.get("start_event"), "memory", None)
    return memory


def _run_started(telemetry: WorkflowTelemetry, workflow: Any, handler: Any, memory: Any) -> None:
    store = handler.ctx.store
    now = time.time_ns()
    current = otel_context.get_current()
    if not trace.get_current_span(current).get_span_context().is_valid:
        current = otel_context.Context()  # no span of the app's: a trace of its own
    flow = telemetry.flows.get(store)
    if flow is None:
        session = None
        if telemetry.memory_type is not None and isinstance(memory, telemetry.memory_type):
            session = getattr(memory, "session_id", None)
            session = session if isinstance(session, str) and session else None
        conversation = (
            telemetry.sessions.get(session, session, now)
            if session
            else Conversation(telemetry, now, None, None)
        )
        flow = telemetry.flows[store] = Flow(conversation, current, getattr(workflow, "agents", {}))
    else:  # resumed from its context: the count goes on, under this run's parent
        flow.parent = current
        flow.apps_span = bool(current)

    def done(future: Any) -> None:
        try:
            if future.cancelled():
                error: BaseException | str | None = sc.ERROR_CANCELLED
            else:
                error = future.exception()
            flow.ended(error)
        except Exception as exc:
            report("LlamaIndex run end", exc)

    # a Future up to llama-index-core 0.13; llama-index-workflows' handler awaits its result task
    on_done = getattr(handler, "add_done_callback", None) or handler._result_task.add_done_callback
    on_done(done)


# --- the old agent's response and its handoff calls ---------------------------------------------


def wrap_parse_agent_output(telemetry: WorkflowTelemetry) -> Any:
    """``parse_agent_output``: whose response it is, when it calls ``handoff``."""

    def parse(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if telemetry.enabled:
            try:
                ev = _event(args, kwargs)
                for call in ev.tool_calls:
                    if call.tool_name == HANDOFF_TOOL:
                        flow = _flow(telemetry, _ctx(args, kwargs))
                        if flow is not None:
                            flow.from_agent = ev.current_agent_name
                            flow.calls = []
                        break
            except Exception as exc:
                report("LlamaIndex agent output", exc)
        return wrapped(*args, **kwargs)

    return parse


def wrap_call_tool(telemetry: WorkflowTelemetry) -> Any:
    """``call_tool``: the ``handoff`` tool's run is the ``handler`` phase."""

    def call_tool(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.enabled:
            return wrapped(*args, **kwargs)
        try:
            ev = _event(args, kwargs)
            flow = _flow(telemetry, _ctx(args, kwargs)) if ev.tool_name == HANDOFF_TOOL else None
        except Exception as exc:
            report("LlamaIndex tool call", exc)
            flow = None
        if flow is None:
            return wrapped(*args, **kwargs)
        target = (ev.tool_kwargs or {}).get("to_agent")
        call = Call(
            ev.tool_id if isinstance(ev.tool_id, str) else None,
            target if isinstance(target, str) and target in flow.agents else None,
            time.time_ns(),
            None if flow.apps_span else _instrumentations_span(),
        )
        flow.calls.append(call)
        return _timed_call(call, wrapped(*args, **kwargs))

    return call_tool


def _instrumentations_span() -> otel_context.Context | None:
    """The current context where the tool is called, if a span is current there (another
    instrumentation's, as openinference's LlamaIndex spans are)."""
    here = otel_context.get_current()
    return here if trace.get_current_span(here).get_span_context().is_valid else None


async def _timed_call(call: Call, step: Any) -> Any:
    try:
        return await step
    finally:
        call.end_ns = time.time_ns()


def wrap_aggregate(telemetry: WorkflowTelemetry) -> Any:
    """``aggregate_tool_results``: the switch (or the same agent asked again) once its
    ``AgentInput`` is returned."""

    def aggregate(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.enabled:
            return wrapped(*args, **kwargs)
        flow = _flow(telemetry, _ctx(args, kwargs))
        if flow is None or not flow.calls:
            return wrapped(*args, **kwargs)
        return _aggregated(flow, wrapped(*args, **kwargs))

    return aggregate


async def _aggregated(flow: Flow, step: Any) -> Any:
    result = await step
    try:
        agent = getattr(result, "current_agent_name", None)
        if isinstance(agent, str) and hasattr(result, "input"):  # an AgentInput, not a StopEvent or None
            flow.decided(agent, time.time_ns())
    except Exception as exc:
        report("LlamaIndex handoff decision", exc)
    return result


# --- the new agent's step and its model call ------------------------------------------------------


def wrap_run_agent_step(telemetry: WorkflowTelemetry) -> Any:
    """``run_agent_step``: the awaited agent's step listens for its model call's first output; a
    step that raises before it ends the handoff with its error."""

    def run_agent_step(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not telemetry.enabled:
            return wrapped(*args, **kwargs)
        flow = _flow(telemetry, _ctx(args, kwargs))
        handoff = flow.awaited if flow is not None else None
        if handoff is None or handoff.awaited_agent != getattr(
            _event(args, kwargs), "current_agent_name", None
        ):
            return wrapped(*args, **kwargs)
        return _awaiting(telemetry, handoff, wrapped, args, kwargs)

    return run_agent_step


async def _awaiting(
    telemetry: WorkflowTelemetry, handoff: Handoff, wrapped: Any, args: Any, kwargs: Any
) -> Any:
    token = AWAITED.set(handoff)
    handoff.listening = True
    telemetry.listen(True)
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as exc:
        if handoff.flow.awaited is handoff:
            handoff.flow.awaited = None
            handoff.emit(time.time_ns(), spoke=False, error=exc)
        raise
    finally:
        handoff.stop_listening()
        AWAITED.reset(token)
        if handoff.flow.awaited is handoff:  # the step ended without a model call we saw
            handoff.flow.awaited = None
            handoff.emit(time.time_ns(), spoke=True)


def chat_event(handoff: Handoff, name: str) -> None:
    """An LLM chat event in the awaited step: its start, then its first chunk (or its end), where
    our listener comes off: the rest of the stream passes without us."""
    if handoff.done:
        return
    if name == "LLMChatStartEvent":
        if not handoff.model_start_ns:
            handoff.model_start_ns = time.time_ns()
    elif name in _FIRST_OUTPUT and handoff.model_start_ns:
        now = time.time_ns()
        if handoff.flow.awaited is handoff:
            handoff.flow.awaited = None
        handoff.stop_listening()
        handoff.emit(now, spoke=True)


_FIRST_OUTPUT = frozenset({"LLMChatInProgressEvent", "LLMChatEndEvent"})
