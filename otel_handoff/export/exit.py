"""A bounded exit: whatever the receiver does (refuses, never answers, answers slowly, never
finishes TLS), flushing at exit waits 1.5 s at most, then one line says what was lost.

The SDK's own shutdown waits out the exporter's timeout and every retry (10 s and more per
export over HTTP against a receiver that accepts and never answers). Here the providers are shut
down on a thread of ours that the exit waits for ``EXIT_TIMEOUT_SECONDS``; then the exporters are
shut down (ending retries and, for gRPC, in-flight calls), the exit waits a moment more, and goes.
Both threads were started with the set-up (``core.delivery``'s lanes): CPython 3.12 refuses to
start one at interpreter shutdown.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from ..core import delivery
from ..core.delivery import EXIT_TIMEOUT_SECONDS
from .quiet import QuietSpanExporter
from .settings import what_to_check

_LOG = logging.getLogger("otel_handoff")

_AFTER_SHUTDOWN_SECONDS = 0.5  # then, for the exporters' own shutdown


class CountingSpanProcessor(BatchSpanProcessor):
    """The SDK's ``BatchSpanProcessor``, counting the spans handed to it, so the exit can say how
    many never reached the receiver (still queued when the exit gave up, too)."""

    def __init__(self, exporter: QuietSpanExporter, **kwargs: Any) -> None:
        super().__init__(exporter, **kwargs)
        self._counted = exporter

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self._counted.ended += 1
        super().on_end(span)


@dataclass(frozen=True)
class ExitReport:
    undelivered: int  # spans that ended and never reached a receiver
    why: str | None  # one clause: why not

    def line(self) -> str | None:
        if not self.undelivered:
            return None
        lost = f"otel-handoff: {self.undelivered} span(s) were not delivered: {self.why}"
        return f"{lost}; {what_to_check('traces', self.why)}."


def shutdown_within(
    tracer_provider: Any, meter_provider: Any, exporters: Sequence[Any], timeout: float = EXIT_TIMEOUT_SECONDS
) -> ExitReport:
    """Flush and shut both providers down within about ``timeout`` seconds, whatever the receiver does.

    An exporter whose receiver is already in an outage is shut down at once (no retries to wait
    for); the others get ``timeout`` seconds to deliver what is left.
    """
    for exporter in exporters:
        if getattr(exporter, "outage_down", False):
            exporter.shutdown()

    def shut_down() -> None:
        try:
            tracer_provider.shutdown()
            if isinstance(meter_provider, MeterProvider):
                meter_provider.shutdown()
        except Exception as exc:  # the exit goes on; the report says what was lost
            _LOG.debug("otel-handoff: provider shutdown failed at exit: %s", exc)

    # on threads started with the set-up: CPython 3.12 starts none at the interpreter's end
    finished, wait = delivery.lane("exit").run(shut_down), timeout
    if finished is None:  # no thread of ours: flush here, bounded by the SDK's own flush timeout
        finished, wait = threading.Event(), 0.0
        if tracer_provider.force_flush(int(timeout * 1000)):
            finished.set()
    # exporter -> why its export in flight has not finished (None: no word from the receiver at all)
    hung: dict[QuietSpanExporter, str | None] = {}
    if not finished.wait(wait):
        # read before the shutdown cuts those exports short
        hung = {e: e.last_failure for e in exporters if isinstance(e, QuietSpanExporter) and e.in_flight}
        stopped = delivery.lane("stop").run(functools.partial(_shut_each, exporters))
        if stopped is not None:
            finished.wait(_AFTER_SHUTDOWN_SECONDS)
    spans = [e for e in exporters if isinstance(e, QuietSpanExporter)]
    return ExitReport(sum(e.undelivered for e in spans), _why(spans, hung, timeout))


def _shut_each(exporters: Sequence[Any]) -> None:
    for exporter in exporters:
        try:
            exporter.shutdown()
        except Exception as exc:
            _LOG.debug("otel-handoff: exporter shutdown failed at exit: %s", exc)


def _why(
    spans: Sequence[QuietSpanExporter], hung: dict[QuietSpanExporter, str | None], timeout: float
) -> str | None:
    lost = [e for e in spans if e.undelivered]
    if not lost:
        return None
    reasons = []
    for exporter in lost:
        failure = hung.get(exporter, exporter.last_failure)
        if exporter in hung and failure is None:
            reasons.append(f"no answer from {exporter.target} in {timeout:g} s")
        elif failure:
            reasons.append(f"{exporter.target}: {failure}")
        else:
            reasons.append(f"{exporter.target} did not take them before the exit")
    return "; ".join(reasons)


def shutdown_at_exit(tracer_provider: Any, meter_provider: Any, exporters: Sequence[Any]) -> None:
    line = shutdown_within(tracer_provider, meter_provider, exporters).line()
    if line:
        _LOG.warning(line)
