"""The one emitter: a :class:`HandoffRecord` becomes its spans and metrics, for every framework.

The ``agent_handoff`` span and its phase children are made back to back, with the real times
the record holds, once the handoff is over: nothing is left open or made current. Phases that
end later (LiveKit's ``on_enter``) and linked spans (``first_speech``, ``reconnect``) go through
:func:`emit_late_phase` and :func:`emit_linked`, which take the :class:`Emitted` handle.

One error convention everywhere (:func:`set_error`): status ERROR and ``error.type``, the
exception's type name and never its message, which can quote the conversation; no
``exception`` event, which would only repeat the type.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, SpanKind

from . import schema as sc
from .record import HandoffRecord, PhaseRecord
from .spans import HandoffTelemetry, set_error

_PHASES = sc.PHASES
# time between phases shorter than this in all is not worth an attribute on every handoff
UNATTRIBUTED_REPORTED_NS = 1_000_000
# phase -> (its span's name, the duration attribute on that span or None when it is on agent_handoff)
_CHILDREN = {
    spec.name: (spec.span, None if spec.on_handoff_span else spec.duration_attribute)
    for spec in sc.PHASE_REGISTRY
}
# phase -> (its duration attribute on agent_handoff or None, counts in the duration, runs after)
_ROLES = {
    spec.name: (
        spec.duration_attribute if spec.on_handoff_span else None,
        spec.role == sc.ROLE_WORK,
        spec.role == sc.ROLE_AFTER,
    )
    for spec in sc.PHASE_REGISTRY
}


class Emitted(NamedTuple):
    """What later spans of a handoff need once its span is made."""

    span_context: trace.SpanContext
    context: otel_context.Context  # holds the handoff span: children's parent, exemplars' context
    parent: otel_context.Context  # the handoff's own parent: where linked spans go
    recording: bool
    attributes: dict[str, Any]  # the span's (the metrics pick from them)
    end_ns: int = 0  # the handoff span's end: a later phase that ends past it goes beside it


def emit(telemetry: HandoffTelemetry, record: HandoffRecord) -> Emitted:
    """Make the record's ``agent_handoff`` span, its phase children and its metrics."""
    parent = record.parent if record.parent is not None else otel_context.get_current()
    if not telemetry.metrics.enabled and _never_records(telemetry.tracer):
        # a NoOp tracer provider and NoOp meters (OTEL_SDK_DISABLED, say): nothing to build
        return Emitted(INVALID_SPAN_CONTEXT, parent, parent, False, telemetry.static_attributes)
    attributes, phase_seconds = _attributes(telemetry, record)
    if sc.GEN_AI_CONVERSATION_ID not in attributes:
        _inherit_conversation_id(parent, attributes)
    span = telemetry.tracer.start_span(
        sc.SPAN_HANDOFF,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=record.links,
        start_time=record.start_ns,
    )
    end_ns = max(record.end_ns, record.start_ns)
    inside = trace.set_span_in_context(span, parent)
    recording = span.is_recording()
    try:
        if recording:  # sampled out (or a NoOp provider): so are its children
            if record.error is not None:
                set_error(span, record.error)
            elif record.outcome == sc.OUTCOME_REJECTED:  # one convention: a refusal is an error too
                set_error(span, sc.OUTCOME_REJECTED)
            tracer = telemetry.tracer
            phases = record.phases
            for phase in phases:
                _child(tracer, phase, inside, end_ns)
            if phases:
                unattributed = _unattributed_ns(phases, record.start_ns, end_ns)
                if unattributed >= UNATTRIBUTED_REPORTED_NS:
                    span.set_attribute(sc.UNATTRIBUTED_DURATION, unattributed / 1e9)
    finally:
        span.end(end_time=end_ns)
    metrics = telemetry.metrics
    if metrics.enabled:
        metrics.record_handoff(attributes[sc.DURATION], attributes, inside)
        if phase_seconds:
            metrics.record_phases(phase_seconds.items(), attributes, inside)
    return Emitted(span.get_span_context(), inside, parent, recording, attributes, end_ns)


def emit_late_phase(telemetry: HandoffTelemetry, emitted: Emitted, phase: PhaseRecord) -> None:
    """A phase that ended after its handoff's span was made (e.g. a long ``on_enter``): a child
    when it ended within the span, else beside it and linked to it (``first_speech``'s way), so
    no phase outlives its handoff; and its metric."""
    if emitted.recording:
        if phase.end_ns <= emitted.end_ns:
            _child(telemetry.tracer, phase, emitted.context, phase.end_ns)
        else:
            _child(telemetry.tracer, phase, emitted.parent, phase.end_ns, [Link(emitted.span_context)])
    if telemetry.metrics.enabled and not isinstance(phase.error, asyncio.CancelledError):
        seconds = max(0, phase.end_ns - phase.start_ns) / 1e9
        telemetry.metrics.record_phases(((phase.name, seconds),), emitted.attributes, emitted.context)


def emit_linked(telemetry: HandoffTelemetry, emitted: Emitted, phase: PhaseRecord) -> None:
    """A span of the handoff's trace, beside it and linked to it (``first_speech``, ``reconnect``)."""
    spec = _PHASES[phase.name]
    seconds = max(0, phase.end_ns - phase.start_ns) / 1e9
    attributes = {spec.duration_attribute: seconds, sc.FRAMEWORK: emitted.attributes[sc.FRAMEWORK]}
    if phase.attributes:
        attributes.update(phase.attributes)
    span = telemetry.tracer.start_span(
        spec.span,
        context=emitted.parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=[Link(emitted.span_context)],
        start_time=phase.start_ns,
    )
    span.end(end_time=max(phase.end_ns, phase.start_ns))
    if telemetry.metrics.enabled:
        telemetry.metrics.record_phases(((phase.name, seconds),), emitted.attributes, emitted.context)


def _attributes(
    telemetry: HandoffTelemetry, record: HandoffRecord
) -> tuple[dict[str, Any], dict[str, float]]:
    """Every attribute of the ``agent_handoff`` span, and the seconds of each phase for the metric."""
    attributes = dict(telemetry.static_attributes)
    attributes[sc.OUTCOME] = record.outcome
    attributes[sc.SEQUENCE] = record.sequence
    if record.from_agent is not None:
        attributes[sc.FROM_AGENT_NAME] = record.from_agent
    if record.from_agent_id is not None:
        attributes[sc.FROM_AGENT_ID] = record.from_agent_id
    if record.to_agent is not None:
        attributes[sc.TO_AGENT_NAME] = record.to_agent
    if record.to_agent_id is not None:
        attributes[sc.TO_AGENT_ID] = record.to_agent_id
    if record.trigger is not None:
        attributes[sc.TRIGGER] = record.trigger
    if record.kind is not None:
        attributes[sc.KIND] = record.kind
    if record.tool_name is not None:
        attributes[sc.GEN_AI_TOOL_NAME] = record.tool_name
    if record.tool_call_id is not None:
        attributes[sc.GEN_AI_TOOL_CALL_ID] = record.tool_call_id
    if record.conversation_id is not None:
        attributes[sc.GEN_AI_CONVERSATION_ID] = record.conversation_id
    if record.attributes:
        attributes.update(record.attributes)
    seconds: dict[str, float] = {}  # several lock waits add up
    work = 0.0
    cut_short = None
    for phase in record.phases:
        end_ns = phase.end_ns
        if not end_ns:
            continue  # still running when the handoff ended: its span ends with it, no duration
        own = phase.own_ns
        value = max(0, (end_ns - phase.start_ns) if own is None else own) / 1e9
        name = phase.name
        total = seconds[name] = seconds.get(name, 0.0) + value
        attribute, is_work, is_after = _ROLES[name]
        if attribute is not None:
            attributes[attribute] = total
        if is_work:
            work += value
        if is_after and isinstance(phase.error, asyncio.CancelledError):
            cut_short = name  # cut short: not a duration of that phase, left out of the metric
    attributes[sc.DURATION] = record.duration if record.duration is not None else work
    if cut_short is not None:
        del seconds[cut_short]
    return attributes, seconds


def _own_ns(phase: PhaseRecord) -> int:
    if phase.own_ns is not None:
        return max(0, phase.own_ns)
    return max(0, phase.end_ns - phase.start_ns) if phase.end_ns else 0


def _never_records(tracer: trace.Tracer) -> bool:
    """A NoOp tracer, directly or behind the API's proxy (until a real provider is set)."""
    if type(tracer) is trace.ProxyTracer:  # its delegate: NoOp until a provider is set
        tracer = getattr(tracer, "_tracer", tracer)
    return type(tracer) is trace.NoOpTracer


def _unattributed_ns(phases: list[PhaseRecord], start_ns: int, end_ns: int) -> int:
    """The time of the handoff that no phase covers (the event loop running other work)."""
    gaps = 0
    reach = start_ns
    for start, end in sorted([(phase.start_ns, phase.end_ns or end_ns) for phase in phases]):
        if start > reach:
            gaps += min(start, end_ns) - reach
        if end > reach:
            reach = end
    return gaps + end_ns - reach if end_ns > reach else gaps


def _child(
    tracer: trace.Tracer,
    phase: PhaseRecord,
    parent: otel_context.Context,
    end_ns: int,
    links: list[Link] | None = None,
) -> None:
    name, duration_attribute = _CHILDREN[phase.name]
    attributes = phase.attributes
    if duration_attribute is not None and phase.end_ns:
        attributes = {**(attributes or {}), duration_attribute: _own_ns(phase) / 1e9}
    span = tracer.start_span(
        name,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
        start_time=phase.start_ns,
    )
    error = phase.error
    if error is not None and not isinstance(error, asyncio.CancelledError):
        set_error(span, error)
    span.end(end_time=phase.end_ns or end_ns)


def _inherit_conversation_id(parent: otel_context.Context, attributes: dict[str, Any]) -> None:
    """The ``gen_ai.conversation.id`` the app (or the framework) already put on the parent span."""
    found = getattr(trace.get_current_span(parent), "attributes", None)
    value = found.get(sc.GEN_AI_CONVERSATION_ID) if found else None
    if isinstance(value, str) and value:
        attributes[sc.GEN_AI_CONVERSATION_ID] = value
