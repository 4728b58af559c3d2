"""Handoffs whose span must exist before they end: across a process, or beside a framework's spans.

A handoff's span is usually made once the handoff is over (:mod:`.emit`), with its real times.
One that crosses a process (an A2A request, a message on a worker bus) must carry its trace
context in the request, and one that a framework's own spans should nest under must be known
when the framework starts them: both need the ``agent_handoff`` span to exist first.

:func:`open_handoff` starts that span at the handoff's start, never made current (the app's
context is untouched); the framework package keeps the :class:`OpenHandoff` in its record
(``HandoffRecord.opened``) and :func:`~.emit.emit` finishes that span with the record, so every
tool still reads one record. :func:`inject` writes the context into a carrier with the
propagator the app configured (``OTEL_PROPAGATORS``, W3C trace context by default);
:func:`extract` and :func:`received` read it on the receiving side.
:func:`sending` notes, in the task that sends a handoff's requests, the open handoff they
carry; a transport's wrapper (:mod:`.a2a`) asks :func:`outgoing` which context to inject.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

from . import schema as sc
from .emit import span_in, still_open
from .faults import guard, report
from .spans import HandoffTelemetry


class OpenHandoff(NamedTuple):
    """An ``agent_handoff`` span started before its handoff ended, and the context holding it."""

    span: trace.Span
    context: otel_context.Context  # the span in its parent's context: what a carrier carries


def abandon(opened: OpenHandoff, end_ns: int | None = None) -> None:
    """End an open span whose handoff will never be emitted (every span we start is ended)."""
    guard("ending an abandoned handoff span", opened.span.end, end_time=end_ns)


def inject(carrier: MutableMapping[str, str], context: otel_context.Context) -> None:
    """Write ``context`` (an :class:`OpenHandoff`'s, or any span's) into ``carrier``."""
    guard("injecting trace context", propagate.inject, carrier, context=context)


def extract(carrier: Mapping[str, Any]) -> otel_context.Context | None:
    """The context a carrier holds, or None when it holds no valid span context."""
    try:
        context = propagate.extract(carrier)
    except Exception as exc:
        report("extracting trace context", exc)
        return None
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class Sending:
    """The open handoff whose requests carry its context, while a framework's code sends them
    (ADK's remote agent calling its server): noted in this task's context by :func:`sending`,
    read by a transport's wrapper through :func:`outgoing`."""

    __slots__ = ("ended", "opened", "sent_ns")

    def __init__(self, opened: OpenHandoff) -> None:
        self.opened = opened
        self.sent_ns = 0  # its first request left (0: none yet)
        self.ended = False  # its handoff is over (its package says so: a span sampled out has no end)

    @property
    def live(self) -> bool:
        """Its handoff is not over, nor its span ended (a record emitted, or abandoned, ends it)."""
        return not self.ended and getattr(self.opened.span, "end_time", None) is None


# our own context variable, never OpenTelemetry's: the app's current context stays as it is
_SENDING: ContextVar[Sending | None] = ContextVar("otel_handoff_sending", default=None)


def sending(opened: OpenHandoff) -> Sending:
    """From here on in this task, requests a transport sends carry ``opened``'s context (until
    its span ends); what they note (the first request's time) is in the returned holder."""
    holder = Sending(opened)
    _SENDING.set(holder)
    return holder


def outgoing(now_ns: int) -> otel_context.Context:
    """The context a request sent now should carry: the open handoff this task sends for (its
    first request's time noted), else the current context (a delegation joins the trace too)."""
    holder = _SENDING.get()
    if holder is None or not holder.live:
        return otel_context.get_current()
    if not holder.sent_ns:
        holder.sent_ns = now_ns
    return holder.opened.context


def open_handoff(telemetry: HandoffTelemetry, start_ns: int, parent: otel_context.Context) -> OpenHandoff:
    """Start the ``agent_handoff`` span now (at ``start_ns``) under ``parent``, never made current;
    :func:`~.emit.emit` ends it (a record that is dropped must :func:`abandon` it). A parent span
    already over (a framework's span for the agent that asked, ended before the handoff's target
    started) puts it one level up, linked to that span: the emitter's own rule for a handoff that
    outlives the span it was asked in. Its attributes, the static ones too, are all set when the
    record is emitted (a span's attributes are set once)."""
    parent_span = span_in(parent)
    links = None
    if getattr(parent_span, "end_time", None) is not None:
        parent, links = still_open(parent, parent_span, None)
    span = telemetry.tracer.start_span(
        sc.SPAN_HANDOFF, context=parent, kind=SpanKind.INTERNAL, links=links, start_time=start_ns
    )
    return OpenHandoff(span, trace.set_span_in_context(span, parent))


class Serving:
    """A request received with a caller's context, while its agent is being served here: where
    this process's ``remote_setup`` span goes, and when it began."""

    __slots__ = ("context", "done", "start_ns")

    def __init__(self, context: otel_context.Context, start_ns: int) -> None:
        self.context = context
        self.start_ns = start_ns
        self.done = False


_SERVING: ContextVar[Serving | None] = ContextVar("otel_handoff_serving", default=None)


@contextmanager
def received(carrier: Mapping[str, Any], now_ns: int) -> Iterator[otel_context.Context | None]:
    """Within: the request's work, under the caller's context (none when the carrier holds
    none), except that a context already continuing the caller's trace (the server's own HTTP
    tracing) stays current; either way :func:`serving_started` can then end this process's
    ``remote_setup`` span."""
    context = extract(carrier)
    if context is None:
        yield None
        return
    current = trace.get_current_span().get_span_context()
    sent = trace.get_current_span(context).get_span_context()
    token = None if current.is_valid and current.trace_id == sent.trace_id else otel_context.attach(context)
    serving = _SERVING.set(Serving(context, now_ns))
    try:
        yield context
    finally:
        _SERVING.reset(serving)
        if token is not None:
            otel_context.detach(token)


def serving_started(telemetry: HandoffTelemetry, now_ns: int) -> None:
    """The served agent's first model call starts (its framework's package says so): the
    ``agent_handoff.remote_setup`` span, from the request's receipt, under the caller's context
    (its handoff). Once per request; nothing outside one received with a context."""
    serving = _SERVING.get()
    if serving is None or serving.done:
        return
    serving.done = True
    spec = sc.PHASES[sc.PHASE_REMOTE_SETUP]
    attributes = {
        spec.duration_attribute: max(0, now_ns - serving.start_ns) / 1e9,
        sc.FRAMEWORK: telemetry.static_attributes[sc.FRAMEWORK],
    }
    span = telemetry.tracer.start_span(
        spec.span,
        context=serving.context,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=serving.start_ns,
    )
    span.end(end_time=max(now_ns, serving.start_ns))
