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
:func:`extract` and :func:`attached` read it on the receiving side; :func:`carrier_keys` names
the keys the propagator writes, so a carrier the app can see is cleaned on receipt.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind

from . import schema as sc
from .faults import guard, report
from .spans import HandoffTelemetry


class OpenHandoff(NamedTuple):
    """An ``agent_handoff`` span started before its handoff ended, and the context holding it."""

    span: trace.Span
    context: otel_context.Context  # the span in its parent's context: what a carrier carries


def open_handoff(
    telemetry: HandoffTelemetry, start_ns: int, parent: otel_context.Context | None = None
) -> OpenHandoff:
    """Start the ``agent_handoff`` span now (at ``start_ns``), under ``parent`` or the current
    context; :func:`~.emit.emit` ends it. A record that is dropped must :func:`abandon` it."""
    parent = parent if parent is not None else otel_context.get_current()
    span = telemetry.tracer.start_span(
        sc.SPAN_HANDOFF,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes=telemetry.static_attributes,
        start_time=start_ns,
    )
    return OpenHandoff(span, trace.set_span_in_context(span, parent))


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


@contextmanager
def attached(carrier: Mapping[str, Any]) -> Iterator[otel_context.Context | None]:
    """Within: the carrier's context is current (the receiving side's spans go under the sender's
    handoff); unchanged when the carrier holds none. Yields that context, or None."""
    context = extract(carrier)
    if context is None:
        yield None
        return
    token = otel_context.attach(context)
    try:
        yield context
    finally:
        otel_context.detach(token)


def carrier_keys() -> frozenset[str]:
    """The keys the configured propagator writes (``traceparent``, ``tracestate``, ``baggage``, …):
    what to take off a carrier the app sees again once it has been read."""
    return frozenset(propagate.get_global_textmap().fields)
