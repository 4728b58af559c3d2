"""One Flows node transition as plain data, and the spans it becomes once the new node is set.

The hot path only takes timestamps. When ``_set_node`` returns (or raises), the handoff span
and its phase children are created together with their real start and end times, so nothing
is ever left open or made current, whatever the pipeline does meanwhile.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from ..core import schema as sc
from ..core.spans import ChatRoot, HandoffTelemetry, set_error


@dataclass
class Phase:
    start_ns: int
    end_ns: int = 0
    actions: tuple[str, ...] = ()
    error_type: str | None = None


@dataclass
class Transition:
    """From the request (the handler starts, or the app asks) until the new node is set."""

    trigger: str
    start_ns: int
    parent: otel_context.Context | None
    tool_name: str | None = None
    tool_call_id: str | None = None
    from_node: str | None = None
    to_node: str | None = None
    context_strategy: str | None = None
    phases: dict[str, Phase] = field(default_factory=dict)
    requested_ns: int = 0  # the handler returned the next node (tool) or the app asked (api)
    waited: bool = False  # another function call was still running when it could have run
    executing_ns: int = 0  # _set_node began
    sequence: int = 0
    span_context: trace.SpanContext | None = None  # once emitted: first_speech links to it


@dataclass
class FlowsTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    flows: weakref.WeakKeyDictionary[Any, FlowState] = field(default_factory=weakref.WeakKeyDictionary)

    def state(self, flow_manager: Any) -> FlowState:
        state = self.flows.get(flow_manager)
        if state is None:
            state = self.flows[flow_manager] = FlowState(self)
        return state


class FlowState:
    """One FlowManager: its requested transition, its handoff count, its root, speech awaited."""

    __slots__ = (
        "__weakref__",
        "awaiting_speech",
        "handoffs",
        "pending",
        "root",
        "start_ns",
        "telemetry",
    )

    def __init__(self, telemetry: FlowsTelemetry) -> None:
        self.telemetry = telemetry
        self.start_ns = time.time_ns()
        self.handoffs = 0
        self.pending: Transition | None = None  # requested by a tool, not yet executing
        self.awaiting_speech: Transition | None = None  # set, until the bot speaks in the new node
        # one trace per conversation when Pipecat traces nothing (an empty context: a new trace)
        root_parent = otel_context.Context()
        self.root = ChatRoot(telemetry.tracer, telemetry.static_attributes, self.start_ns, root_parent)

    def request(self, transition: Transition) -> None:
        """A handler asked for a transition; one still waiting was overridden by it."""
        if self.pending is not None:
            self.drop_pending(transition.requested_ns)
        self.pending = transition

    def drop_pending(self, now_ns: int) -> None:
        """The requested transition will not run: skipped, with the wait it spent, if any."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.waited and sc.PHASE_FUNCTION_CALL_WAIT not in pending.phases:
            pending.phases[sc.PHASE_FUNCTION_CALL_WAIT] = Phase(pending.requested_ns, now_ns)
        self.emit(pending, sc.OUTCOME_SKIPPED, now_ns)

    def emit(self, t: Transition, outcome: str, end_ns: int, error: BaseException | None = None) -> None:
        """The handoff span and its children, with their real times, and the metrics."""
        telemetry = self.telemetry
        self.handoffs += 1
        t.sequence = self.handoffs
        attributes = dict(telemetry.static_attributes)
        attributes[sc.TRIGGER] = t.trigger
        attributes[sc.OUTCOME] = outcome
        attributes[sc.SEQUENCE] = t.sequence
        if t.from_node is not None:
            attributes[sc.GEN_AI_HANDOFF_FROM_AGENT] = t.from_node
        if t.to_node is not None:
            attributes[sc.GEN_AI_HANDOFF_TO_AGENT] = t.to_node
        if t.context_strategy:
            attributes[sc.CONTEXT_STRATEGY] = t.context_strategy
        if t.tool_name:
            attributes[sc.GEN_AI_TOOL_NAME] = t.tool_name
        if t.tool_call_id:
            attributes[sc.GEN_AI_TOOL_CALL_ID] = t.tool_call_id
        phase_seconds: list[tuple[str, float]] = []
        total_ns = 0
        for name, (_, duration_key) in sc.FLOWS_PHASES.items():
            phase = t.phases.get(name)
            if phase is None or not phase.end_ns:
                continue
            ns = max(0, phase.end_ns - phase.start_ns)
            if name == "context_update" and "summary" in t.phases:  # the summary is its own phase
                summary = t.phases["summary"]
                ns = max(0, ns - max(0, (summary.end_ns or phase.end_ns) - summary.start_ns))
            attributes[duration_key] = ns / 1e9
            phase_seconds.append((name, ns / 1e9))
            total_ns += ns
        wait = t.phases.get(sc.PHASE_FUNCTION_CALL_WAIT)
        if wait is not None and wait.end_ns:
            attributes[sc.FUNCTION_CALL_WAIT_DURATION] = max(0, wait.end_ns - wait.start_ns) / 1e9
            phase_seconds.append((sc.PHASE_FUNCTION_CALL_WAIT, attributes[sc.FUNCTION_CALL_WAIT_DURATION]))
        attributes[sc.DURATION] = total_ns / 1e9

        span = telemetry.tracer.start_span(
            sc.SPAN_HANDOFF,
            context=self._parent(t),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=t.start_ns,
        )
        try:
            if error is not None:
                set_error(span, error)
            inside = trace.set_span_in_context(span)
            for name, phase in t.phases.items():
                self._child(name, phase, inside, end_ns)
        finally:
            span.end(end_time=max(end_ns, t.start_ns))
        t.span_context = span.get_span_context()
        telemetry.metrics.record_handoff(attributes[sc.DURATION], attributes, inside)
        telemetry.metrics.record_phases(phase_seconds, attributes, inside)

    def _child(self, name: str, phase: Phase, parent: otel_context.Context, fallback_end_ns: int) -> None:
        span_name = (
            sc.SPAN_FUNCTION_CALL_WAIT if name == sc.PHASE_FUNCTION_CALL_WAIT else sc.FLOWS_PHASES[name][0]
        )
        attributes: dict[str, Any] = {}
        if phase.actions:
            attributes[sc.ACTIONS] = list(phase.actions)
        child = self.telemetry.tracer.start_span(
            span_name,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=phase.start_ns,
        )
        if phase.error_type is not None:
            set_error(child, phase.error_type)
        child.end(end_time=phase.end_ns or fallback_end_ns)

    def _parent(self, t: Transition) -> otel_context.Context:
        return t.parent if t.parent is not None else self.root.context()

    def first_speech(self, now_ns: int) -> None:
        """The bot started speaking: the dead air of the last handoff ends here."""
        t, self.awaiting_speech = self.awaiting_speech, None
        if t is None or t.span_context is None:
            return
        delay = max(0, now_ns - t.start_ns) / 1e9
        span = self.telemetry.tracer.start_span(
            sc.SPAN_FIRST_SPEECH,
            context=self._parent(t),
            kind=SpanKind.INTERNAL,
            attributes={sc.FIRST_SPEECH_DELAY: delay, sc.FRAMEWORK: sc.FRAMEWORK_PIPECAT},
            links=[Link(t.span_context)],
            start_time=t.start_ns,
        )
        span.end(end_time=now_ns)

    def finish(self, now_ns: int) -> None:
        """The conversation ended (or tracing stopped): nothing stays open or pending."""
        self.drop_pending(now_ns)
        self.awaiting_speech = None
        self.root.end(self.handoffs, now_ns)
