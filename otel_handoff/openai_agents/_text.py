"""Text runs of the OpenAI Agents SDK: one handoff, from the old agent's model call to the new one's.

What the user waits for is longer than the SDK's own handoff span (the ``on_handoff`` callback and
the input filter): it starts when the old agent's model call that asked for the handoff ends and
lasts until the new agent's first output (its first streamed delta, or the end of its first model
call when not streamed). Each run (``Runner.run``, ``run_sync``, ``run_streamed``) is a
:class:`TextRun` in a ContextVar, shared by the run loop's tasks; a handoff only takes timestamps
while it runs and becomes a record for the core emitter when the new agent's first output comes
(or the run ends first).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from contextlib import aclosing
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import wrapt
from agents.tracing import get_current_trace  # imported only where the SDK is installed
from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.faults import report
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

# the run whose loop this code runs in; the run loop's tasks inherit it
RUN: ContextVar[TextRun | None] = ContextVar("otel_handoff_openai_agents_run", default=None)


@dataclass
class AgentsTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    default_hooks: tuple[Any, Any] = (None, None)  # RunHooksBase.on_handoff, AgentHooksBase.on_handoff
    # realtime sessions opened while instrumented -> what we observe of each
    sessions: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)
    # (realtime model class, "send_event") wrapped on first sight; undone by uninstrument()
    lazily_wrapped: list[tuple[type, str]] = field(default_factory=list)
    # the realtime event types on_event looks at now (see _realtime.refresh_watched)
    watched: frozenset[str] = frozenset()


def conversation_id(kwargs: dict[str, Any]) -> str | None:
    """The id the app gave the run: its group id, its session's id, or a server conversation id."""
    candidates = (
        getattr(kwargs.get("run_config"), "group_id", None),
        getattr(kwargs.get("session"), "session_id", None),
        kwargs.get("conversation_id"),
    )
    return next((value for value in candidates if isinstance(value, str) and value), None)


def sdk_trace_id() -> str | None:
    """The SDK's own trace id (``trace_…``), so the run can be found in the SDK's traces too."""
    current = get_current_trace()
    value = getattr(current, "trace_id", None)
    return value if isinstance(value, str) and value.startswith("trace_") else None


def current_parent() -> otel_context.Context | None:
    """The current context when it holds a span (the app's, or an SDK instrumentation's)."""
    if trace.get_current_span().get_span_context().is_valid:
        return otel_context.get_current()
    return None


class TextRun:
    """One run: its conversation, when its last model call ended, the handoff awaiting output."""

    __slots__ = ("conversation", "last_model_end_ns", "pending")

    def __init__(self, telemetry: AgentsTelemetry, start_ns: int, conversation_id: str | None) -> None:
        # a handoff with no span current goes under the run's agent_handoff.chat root
        self.conversation = Conversation(telemetry, start_ns, otel_context.get_current(), conversation_id)
        self.last_model_end_ns = 0
        self.pending: TextHandoff | None = None  # executed, until the new agent's first output

    def model_call_started(self, now: int) -> None:
        pending = self.pending
        if pending is not None and not pending.model_start_ns:
            pending.model_start_ns = now

    def first_output(self, now: int, streamed: bool) -> None:
        pending = self.pending
        if pending is not None and pending.model_start_ns:
            self.pending = None
            pending.streamed = streamed
            pending.emit(now)

    def model_call_ended(self, now: int, streamed: bool) -> None:
        self.last_model_end_ns = now
        self.first_output(now, streamed)  # a stream without any delta: its end

    def finish(self, now: int) -> None:
        """The run is over: a handoff still awaiting output ends here, then the run's root."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.emit(now, ended_by=sc.ENDED_BY_RUN_END)
        self.conversation.end(now)


@dataclass(slots=True)
class TextHandoff:
    """One handoff of a text run, as timestamps until it is emitted."""

    run: TextRun
    start_ns: int  # the old agent's model call ended
    parent: otel_context.Context | None
    sequence: int
    from_agent: str | None
    tool_name: str | None
    tool_call_id: str | None
    trace_id: str | None
    has_hooks: bool
    to_agent: str | None = None
    invoke_start_ns: int = 0  # on_invoke_handoff: the SDK's input validation and the app's on_handoff
    invoke_end_ns: int = 0
    hooks_end_ns: int = 0  # the SDK reads the input filter right after the hooks
    filtered: bool = False  # an input filter or history nesting was configured
    executed_ns: int = 0  # execute_handoffs returned: the new agent's turn is next
    model_start_ns: int = 0  # the new agent's first model call
    streamed: bool = False

    def executed(self, handoff: Any, run_config: Any, now: int) -> None:
        self.executed_ns = now
        nest = handoff.nest_handoff_history
        if nest is None:
            nest = getattr(run_config, "nest_handoff_history", False)
        self.filtered = bool(
            handoff.input_filter is not None
            or getattr(run_config, "handoff_input_filter", None) is not None
            or nest
        )

    def phases(self, end_ns: int, error: BaseException | None, spoke: bool) -> list[PhaseRecord]:
        """The phases seen; the one running when ``error`` passed gets it, one never finished
        (no output before the run ended) is ended with the handoff, without a duration."""
        phases: list[PhaseRecord] = []
        if not self.invoke_start_ns:
            return phases
        invoke_end = self.invoke_end_ns
        phases.append(
            PhaseRecord(
                sc.PHASE_ON_HANDOFF,
                self.invoke_start_ns,
                invoke_end or end_ns,
                None,
                None if invoke_end else error,
            )
        )
        if not invoke_end:
            return phases
        hooks_end = self.hooks_end_ns or self.executed_ns or end_ns
        if self.has_hooks:
            failed_here = error if not self.hooks_end_ns else None
            phases.append(PhaseRecord(sc.PHASE_HOOKS, invoke_end, hooks_end, None, failed_here))
        executed = self.executed_ns
        if self.hooks_end_ns and (self.filtered or (error is not None and not executed)):
            phases.append(PhaseRecord(sc.PHASE_INPUT_FILTER, hooks_end, executed or end_ns, None, error))
        if executed and self.model_start_ns:
            phases.append(PhaseRecord(sc.PHASE_SETUP, executed, self.model_start_ns))
            phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, self.model_start_ns, end_ns if spoke else 0))
        elif executed and not spoke:  # the run ended during the new agent's setup
            phases.append(PhaseRecord(sc.PHASE_SETUP, executed, 0))
        return phases

    def emit(self, end_ns: int, error: BaseException | None = None, ended_by: str | None = None) -> None:
        attributes: dict[str, Any] = {sc.STREAMED: self.streamed}
        if self.trace_id is not None:
            attributes[sc.FRAMEWORK_TRACE_ID] = self.trace_id
        emit_tool_handoff(
            self.run.conversation, self, self.start_ns, end_ns, sc.TRIGGER_TOOL, attributes, error, ended_by
        )


def emit_tool_handoff(
    conversation: Conversation,
    handoff: Any,
    start_ns: int,
    end_ns: int,
    trigger: str,
    attributes: dict[str, Any],
    error: BaseException | None,
    ended_by: str | None,
) -> None:
    """A text or realtime handoff (a tool call, its phases, how it ended) as one record.

    ``handoff`` has the tool call's ``parent``, ``sequence``, agents, tool and ``phases()``.
    """
    if ended_by is not None:
        attributes[sc.ENDED_BY] = ended_by
    end_ns = max(end_ns, start_ns)
    conversation.emit(
        start_ns=start_ns,
        end_ns=end_ns,
        parent=handoff.parent,
        sequence=handoff.sequence,
        outcome=sc.OUTCOME_COMPLETED if error is None else sc.OUTCOME_ERROR,
        from_agent=handoff.from_agent,
        to_agent=handoff.to_agent,
        trigger=trigger,
        tool_name=handoff.tool_name,
        tool_call_id=handoff.tool_call_id,
        error=sc.ERROR_CANCELLED if isinstance(error, asyncio.CancelledError) else error,
        attributes=attributes,
        phases=handoff.phases(end_ns, error, spoke=error is None and ended_by is None),
        duration=(end_ns - start_ns) / 1e9,
        phases_overlap=trigger == sc.TRIGGER_REALTIME_TOOL,  # the session update within the drain
    )


class ObservedHandoff(wrapt.ObjectProxy):  # type: ignore[misc]
    """The SDK's ``Handoff`` for one ``execute_handoffs`` call: times the app's ``on_handoff``.

    Only this call's ``ToolRunHandoff`` holds the proxy; the app's ``Handoff`` object is untouched.
    The SDK reads ``input_filter`` right after the ``on_handoff`` hooks: that read ends them.
    """

    def __init__(self, wrapped: Any, handoff: TextHandoff) -> None:
        super().__init__(wrapped)
        self._self_handoff = handoff

    def on_invoke_handoff(self, context: Any, arguments: Any) -> Any:
        return _invoke(self._self_handoff, self.__wrapped__.on_invoke_handoff, context, arguments)

    @property
    def input_filter(self) -> Any:
        handoff = self._self_handoff
        if handoff.invoke_end_ns and not handoff.hooks_end_ns:
            handoff.hooks_end_ns = time.time_ns()
        return self.__wrapped__.input_filter


async def _invoke(handoff: TextHandoff, invoke: Any, context: Any, arguments: Any) -> Any:
    handoff.invoke_start_ns = time.time_ns()
    agent = await invoke(context, arguments)
    handoff.invoke_end_ns = time.time_ns()
    handoff.to_agent = getattr(agent, "name", None)
    return agent


def begin(telemetry: AgentsTelemetry, kwargs: dict[str, Any]) -> tuple[TextHandoff, dict[str, Any]]:
    """``execute_handoffs`` starts: the handoff it runs, and the keyword arguments to run it with."""
    now = time.time_ns()
    run = RUN.get()
    if run is None:  # not started through Runner (an AgentRunner subclass overriding run)
        run = TextRun(telemetry, now, None)
    run_handoffs = kwargs["run_handoffs"]
    agent = kwargs["public_agent"]
    from_agent = getattr(agent, "name", None)
    parent = current_parent()
    trace_id = sdk_trace_id()
    conversation = run.conversation
    chosen = run_handoffs[0]
    tool_call = chosen.tool_call
    handoff = TextHandoff(
        run=run,
        start_ns=run.last_model_end_ns if 0 < run.last_model_end_ns <= now else now,
        parent=parent,
        sequence=conversation.next_sequence(),
        from_agent=from_agent,
        tool_name=getattr(tool_call, "name", None),
        tool_call_id=getattr(tool_call, "call_id", None),
        trace_id=trace_id,
        has_hooks=_has_hooks(telemetry, kwargs.get("hooks"), agent),
        to_agent=getattr(chosen.handoff, "agent_name", None),
    )
    for other in run_handoffs[1:]:  # the SDK runs the first one only
        attributes = {sc.REJECTION_REASON: sc.REJECTED_MULTIPLE}
        if trace_id is not None:
            attributes[sc.FRAMEWORK_TRACE_ID] = trace_id
        conversation.emit(
            start_ns=now,
            end_ns=now,
            parent=parent,
            sequence=conversation.next_sequence(),
            outcome=sc.OUTCOME_REJECTED,
            from_agent=from_agent,
            to_agent=getattr(other.handoff, "agent_name", None),
            trigger=sc.TRIGGER_TOOL,
            tool_name=getattr(other.tool_call, "name", None),
            tool_call_id=getattr(other.tool_call, "call_id", None),
            attributes=attributes,
            duration=0.0,
        )
    observed = replace(chosen, handoff=ObservedHandoff(chosen.handoff, handoff))
    return handoff, {**kwargs, "run_handoffs": [observed, *run_handoffs[1:]]}


def executed(handoff: TextHandoff, kwargs: dict[str, Any]) -> None:
    """``execute_handoffs`` returned: the new agent's setup and first model call come next."""
    now = time.time_ns()
    handoff.executed(kwargs["run_handoffs"][0].handoff, kwargs.get("run_config"), now)
    run = handoff.run
    if RUN.get() is not run:  # nobody will see the new agent's output: it ends here
        handoff.emit(now)
        return
    if run.pending is not None:  # cannot happen with the SDK's loop; never leave one unended
        run.pending.emit(now, ended_by=sc.ENDED_BY_RUN_END)
    run.pending = handoff


def failed(handoff: TextHandoff, error: BaseException) -> None:
    """``on_handoff``, a hook or the input filter raised: the exception goes on unchanged."""
    handoff.emit(time.time_ns(), error=error)


def _has_hooks(telemetry: AgentsTelemetry, hooks: Any, agent: Any) -> bool:
    run_default, agent_default = telemetry.default_hooks
    if hooks is not None and getattr(type(hooks), "on_handoff", run_default) is not run_default:
        return True
    agent_hooks = getattr(agent, "hooks", None)
    return agent_hooks is not None and getattr(type(agent_hooks), "on_handoff", agent_default) is not (
        agent_default
    )


class ObservedModelCall:
    """``model_run_context`` around a non-streamed model call: when it starts and ends."""

    __slots__ = ("_inner", "_run")

    def __init__(self, inner: Any, run: TextRun) -> None:
        self._inner = inner
        self._run = run

    def __enter__(self) -> Any:
        try:
            self._run.model_call_started(time.time_ns())
        except Exception as exc:
            report("model call start", exc)
        return self._inner.__enter__()

    def __exit__(self, *exc_info: Any) -> Any:
        suppress = self._inner.__exit__(*exc_info)
        if exc_info[0] is None:
            try:
                self._run.model_call_ended(time.time_ns(), streamed=False)
            except Exception as exc:
                report("model call end", exc)
        return suppress


class StreamEnd:
    """A streamed model call no handoff waits on: only when it ends (the SDK closes it with
    ``aclosing``), which may start a handoff. Iterating goes straight to the SDK's own generator,
    so a streamed item costs nothing of ours."""

    __slots__ = ("_run", "_stream")

    def __init__(self, stream: Any, run: TextRun) -> None:
        self._stream = stream
        self._run = run

    def __aiter__(self) -> Any:
        return self._stream.__aiter__()

    def __anext__(self) -> Any:
        return self._stream.__anext__()

    def asend(self, value: Any) -> Any:
        return self._stream.asend(value)

    def athrow(self, *exc_info: Any) -> Any:
        return self._stream.athrow(*exc_info)

    async def aclose(self) -> None:
        try:
            self._run.model_call_ended(time.time_ns(), streamed=True)
        except Exception as exc:
            report("model stream end", exc)
        await self._stream.aclose()


async def observed_stream(stream: Any, run: TextRun) -> Any:
    """A streamed model call, item by item as the SDK sees it: its first delta and its end."""
    try:
        run.model_call_started(time.time_ns())
    except Exception as exc:
        report("model stream start", exc)
    waiting = True
    async with aclosing(stream):
        async for item in stream:
            if waiting and str(getattr(item, "type", "")).endswith(".delta"):
                waiting = False
                try:
                    run.first_output(time.time_ns(), streamed=True)
                except Exception as exc:
                    report("model stream delta", exc)
            yield item
    try:
        run.model_call_ended(time.time_ns(), streamed=True)
    except Exception as exc:
        report("model stream end", exc)
