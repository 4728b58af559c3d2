"""The one emitter: a :class:`HandoffRecord` becomes its spans and metrics, for every framework.

The ``agent_handoff`` span and its phase children are made back to back, with the real times
the record holds, once the handoff is over: nothing is left open or made current. Where the
framework makes its own spans of the handoff while it runs (LiveKit's ``update_agent``), the
``agent_handoff`` span is started early to be their parent (:mod:`.crossing`), and completed
here; the phases the framework's spans already show (``HandoffRecord.framework_spans``) are then
not sent again. Phases that
end later (LiveKit's ``on_enter``) and linked spans (``first_speech``, ``reconnect``) go through
:func:`emit_late_phase` and :func:`emit_linked`, which take the :class:`Emitted` handle.

One error convention everywhere (:func:`set_error`): status ERROR and ``error.type``, the
exception's type name and never its message, which can quote the conversation; no
``exception`` event, which would only repeat the type.
"""

from __future__ import annotations

import asyncio
import operator
from itertools import compress
from operator import is_not
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, Link, NonRecordingSpan, SpanKind

from . import schema as sc
from .record import HandoffRecord, PhaseRecord
from .spans import HandoffTelemetry, set_error

_PHASES = sc.PHASES
# time between phases shorter than this in all is not worth an attribute on every handoff
UNATTRIBUTED_REPORTED_S = 0.001
# the record's optional fields -> their attribute keys, in the span's attribute order
_OPTIONAL = (
    ("from_agent", sc.FROM_AGENT_NAME),
    ("from_agent_id", sc.FROM_AGENT_ID),
    ("to_agent", sc.TO_AGENT_NAME),
    ("to_agent_id", sc.TO_AGENT_ID),
    ("trigger", sc.TRIGGER),
    ("kind", sc.KIND),
    ("tool_name", sc.GEN_AI_TOOL_NAME),
    ("tool_call_id", sc.GEN_AI_TOOL_CALL_ID),
    ("conversation_id", sc.GEN_AI_CONVERSATION_ID),
)


def _span_reader() -> Any:
    """How to read the span a Context holds: in C, a dict look-up under the key the API's own
    ``set_span_in_context`` writes (found through it, no private name), ~4 opcodes a handoff where
    ``trace.get_current_span`` costs ~30; that reader itself if the API ever stores it otherwise."""
    probe = NonRecordingSpan(INVALID_SPAN_CONTEXT)
    written = trace.set_span_in_context(probe, otel_context.Context())
    if len(written) == 1:
        (key,) = written
        if written[key] is probe and trace.get_current_span(written) is probe:
            return operator.methodcaller("get", key)  # None where it holds no span
    return trace.get_current_span  # INVALID_SPAN where it holds none: read alike below


_span_of: Any = _span_reader()
# the span a Context holds (None or an invalid span where it holds none): for core.crossing and the
# framework packages
span_in: Any = _span_of
# global providers behind which the API's ProxyTracer delegates to a NoOp tracer
_NEVER_RECORDING_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_OPTIONAL_FIELDS = operator.attrgetter(*(field for field, _ in _OPTIONAL))
_OPTIONAL_KEYS = tuple(key for _, key in _OPTIONAL)
_NONES = (None,) * len(_OPTIONAL)
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


# phases the framework may span itself: not sent again where its spans are under agent_handoff
_SENT_BY_FRAMEWORK = frozenset(spec.name for spec in sc.PHASE_REGISTRY if spec.framework_span)
# of those, the ones whose seconds are on their own span otherwise: then on agent_handoff
_MOVED_TO_HANDOFF = {
    spec.name: spec.duration_attribute
    for spec in sc.PHASE_REGISTRY
    if spec.framework_span and not spec.on_handoff_span
}

_INTERVAL = operator.attrgetter("start_ns", "end_ns")  # a phase's (start, end), in C


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
    parent_span = _span_of(parent)
    if sc.GEN_AI_CONVERSATION_ID not in attributes:
        _inherit_conversation_id(parent_span, attributes)
    end_ns = max(record.end_ns, record.start_ns)
    opened = record.opened
    if opened is None:
        links = record.links
        ended = getattr(parent_span, "end_time", None)
        if ended is not None and ended < end_ns:  # the span it was asked in is over: one level up
            parent, links = still_open(parent, parent_span, links)
        span = telemetry.tracer.start_span(
            sc.SPAN_HANDOFF,
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=record.start_ns,
        )
        inside = trace.set_span_in_context(span, parent)
    else:  # started when the handoff began (core.crossing): finished here with the record
        span, inside = opened
        span.set_attributes(attributes)
        for link in record.links or ():
            span.add_link(link.context, link.attributes)
    recording = span.is_recording()
    try:
        if recording:  # sampled out (or a NoOp provider): so are its children
            if record.error is not None:
                set_error(span, record.error)
            elif record.outcome == sc.OUTCOME_REJECTED:  # one convention: a refusal is an error too
                set_error(span, sc.OUTCOME_REJECTED)
            tracer = telemetry.tracer
            phases = record.phases
            if record.framework_spans:  # what the framework's own spans show is not sent again
                phases = [phase for phase in phases if phase.name not in _SENT_BY_FRAMEWORK]
            for phase in phases:
                _child(tracer, phase, inside, end_ns)
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
    conversation_id = emitted.attributes.get(sc.GEN_AI_CONVERSATION_ID)
    if conversation_id is not None:
        attributes[sc.GEN_AI_CONVERSATION_ID] = conversation_id
    if phase.attributes:
        attributes.update(phase.attributes)
    parent, links = emitted.parent, [Link(emitted.span_context)]
    parent_span = _span_of(parent)
    ended = getattr(parent_span, "end_time", None)
    if ended is not None and ended < phase.end_ns:  # as for the handoff: not past its parent's end
        parent, links = still_open(parent, parent_span, links)
    span = telemetry.tracer.start_span(
        spec.span,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        links=links,
        start_time=phase.start_ns,
    )
    span.end(end_time=max(phase.end_ns, phase.start_ns))
    if telemetry.metrics.enabled:
        telemetry.metrics.record_phases(((phase.name, seconds),), emitted.attributes, emitted.context)


def count_unreachable(telemetry: HandoffTelemetry, from_agent: str | None, calls: int = 1) -> None:
    """Handoff tool calls the framework refused before any handoff (a target ``from_agent`` may not
    reach): no span, as nothing was handed off; counted in ``agent_handoff.unreachable_calls``."""
    metrics = telemetry.metrics
    if not metrics.enabled:
        return
    attributes = {sc.FRAMEWORK: telemetry.static_attributes[sc.FRAMEWORK]}
    if from_agent is not None:
        attributes[sc.FROM_AGENT_NAME] = from_agent
    metrics.count_unreachable(attributes, calls)


def _attributes(
    telemetry: HandoffTelemetry, record: HandoffRecord
) -> tuple[dict[str, Any], dict[str, float]]:
    """Every attribute of the ``agent_handoff`` span, and the seconds of each phase for the metric."""
    attributes = dict(telemetry.static_attributes)
    attributes[sc.OUTCOME] = record.outcome
    attributes[sc.SEQUENCE] = record.sequence
    # each optional field that is set (not None; "" is a value), in C: one line of Python per handoff
    values = _OPTIONAL_FIELDS(record)
    attributes.update(compress(zip(_OPTIONAL_KEYS, values, strict=True), map(is_not, values, _NONES)))
    if record.attributes:
        attributes.update(record.attributes)
    if not record.phases:  # a decision that landed (AG2): no phase to add up
        attributes[sc.DURATION] = record.duration if record.duration is not None else 0.0
        return attributes, {}
    seconds: dict[str, float] = {}  # several lock waits add up
    work = 0.0
    cut_short = None
    covered = 0.0  # the phases' own time, nested ones aside: the union of their spans if none overlap
    for phase in record.phases:
        end_ns = phase.end_ns
        if not end_ns:  # still running when the handoff ended: its span ends with it, no duration
            covered += max(0, record.end_ns - phase.start_ns) / 1e9
            continue
        own = phase.own_ns
        value = max(0, (end_ns - phase.start_ns) if own is None else own) / 1e9
        name = phase.name
        total = seconds[name] = seconds.get(name, 0.0) + value
        attribute, is_work, is_after = _ROLES[name]
        if attribute is not None:
            attributes[attribute] = total
            covered += value
            if is_work:
                work += value
        elif is_after:
            covered += value
            if isinstance(phase.error, asyncio.CancelledError):
                cut_short = name  # cut short: not a duration of that phase, left out of the metric
            if record.framework_spans and name in _MOVED_TO_HANDOFF:  # no span of ours to hold it
                attributes[_MOVED_TO_HANDOFF[name]] = total
    # phases do not overlap (a nested one aside; a phase's own time leaves out what is nested in
    # it): what they do not cover is the span's time less theirs (tests/support.py checks)
    if record.phases_overlap:
        covered = _union_seconds(record)
    unattributed = (record.end_ns - record.start_ns) / 1e9 - covered
    if unattributed >= UNATTRIBUTED_REPORTED_S:
        attributes[sc.UNATTRIBUTED_DURATION] = unattributed
    attributes[sc.DURATION] = record.duration if record.duration is not None else work
    if cut_short is not None:
        del seconds[cut_short]
    return attributes, seconds


def _union_seconds(record: HandoffRecord) -> float:
    """The time a handoff's phases cover together, where some run side by side (a nested phase
    lies inside another, so it adds nothing); one still running counts to the handoff's end."""
    end = record.end_ns
    covered, reach = 0, record.start_ns
    for start, stop in sorted(map(_INTERVAL, record.phases)):
        stop = min(stop or end, end)
        if stop > reach:
            covered += stop - max(start, reach)
            reach = stop
    return covered / 1e9


def _own_ns(phase: PhaseRecord) -> int:
    if phase.own_ns is not None:
        return max(0, phase.own_ns)
    return max(0, phase.end_ns - phase.start_ns) if phase.end_ns else 0


def _never_records(tracer: trace.Tracer) -> bool:
    """A NoOp tracer, directly or behind the API's proxy (NoOp until a real provider is set: the
    global one, read through the API's public getter, is still its proxy or a NoOp provider)."""
    if type(tracer) is trace.ProxyTracer:
        return isinstance(trace.get_tracer_provider(), _NEVER_RECORDING_PROVIDERS)
    return type(tracer) is trace.NoOpTracer


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


def still_open(
    parent: otel_context.Context, parent_span: Any, links: list[Link] | None
) -> tuple[otel_context.Context, list[Link]]:
    """A handoff outlives the span it was requested in (LiveKit's ``agent_turn``, an app's span
    around ``update_agent()``): a child ending after its parent is what Jaeger flags, so it goes
    under that span's own parent, linked to it. A root stays where it is."""
    above = getattr(parent_span, "parent", None)
    if above is None or not above.is_valid:
        return parent, links or []
    link = Link(parent_span.get_span_context())
    return trace.set_span_in_context(NonRecordingSpan(above), parent), [*(links or ()), link]


def _inherit_conversation_id(parent_span: trace.Span, attributes: dict[str, Any]) -> None:
    """The ``gen_ai.conversation.id`` the app (or the framework) already put on the parent span."""
    found = getattr(parent_span, "attributes", None)
    value = found.get(sc.GEN_AI_CONVERSATION_ID) if found else None
    if isinstance(value, str) and value:
        attributes[sc.GEN_AI_CONVERSATION_ID] = value
