"""Exporters that log a failing receiver once per outage, and once when it answers again."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .credentials import redact
from .settings import Signal, what_to_check

_LOG = logging.getLogger("otel_handoff")
T = TypeVar("T")
_WHAT: dict[Signal, str] = {"traces": "spans", "metrics": "metrics"}
_RETRYING = re.compile(r",? ?retrying in [^,]*$")  # the exporter's retry note: the exit ends it
_REASON_LENGTH = 300
# urllib3's words for a connection it could not make (OTLP/HTTP), around the one that matters
_URLLIB3_RETRIES = re.compile(
    r"HTTPS?ConnectionPool\([^)]*\): Max retries exceeded with url: \S+ \(Caused by \w+\((.*)\)\)", re.S
)
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def plain_reason(reason: str) -> str:
    """An exporter's failure in a few words: urllib3's connection-pool wrapping cut down to its cause
    (``Connection refused``, ``Name or service not known``), the rest as the exporter said it."""
    found = _URLLIB3_RETRIES.search(reason)
    if found is None:
        return reason
    cause = _ERRNO.search(found.group(1))
    said = cause.group(1).strip() if cause else found.group(1).rsplit(": ", 1)[-1].strip("'\" ")
    return reason[: found.start()] + said + reason[found.end() :]


_capture = threading.local()


class _CaptureFilter(logging.Filter):
    """Takes an exporter's warnings on the thread running our export, instead of logging them."""

    def filter(self, record: logging.LogRecord) -> bool:
        sink: list[str] | None = getattr(_capture, "sink", None)
        if sink is None or record.levelno < logging.WARNING:
            return True
        sink.append(record.getMessage())
        return False


_FILTER = _CaptureFilter()


@contextmanager
def _captured_warnings(logger_names: Iterable[str]) -> Iterator[list[str]]:
    """Collect (instead of log) WARNING+ records of ``logger_names`` logged on this thread."""
    for name in logger_names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    previous = getattr(_capture, "sink", None)
    sink: list[str] = []
    _capture.sink = sink
    try:
        yield sink
    finally:
        _capture.sink = previous


_down: dict[str, set[str]] = {}  # receiver (host:port) -> what fails to reach it: "spans", "metrics"
_down_lock = threading.Lock()


class Outage:
    """Logs when exports to a receiver start failing and when they work again, nothing between.

    Spans and metrics sent to the same receiver share its outage: one warning when it goes away.
    """

    def __init__(self, signal: Signal, exporter: object, target: str) -> None:
        self._what, self._signal = _WHAT[signal], signal
        self.endpoint = target  # where it sends: never shown, its credentials included
        self._target = self.target = redact(target)  # what our lines show
        self.last_reason: str | None = None  # why the last failed export failed
        self.in_flight_reasons: list[str] | None = None
        self._receiver = urlsplit(target).netloc or target  # never shown: which outage is whose
        # exporters log through their modules' loggers (getLogger(__name__)), base classes' too
        self._loggers = sorted({cls.__module__ for cls in type(exporter).__mro__} - {"builtins", "abc"})

    @property
    def down(self) -> bool:
        """The receiver's last export failed: it is in an outage."""
        with _down_lock:
            return bool(_down.get(self._receiver))

    def run(
        self, export: Callable[[], T], succeeded: Callable[[T], bool], failure: T, stopped: Callable[[], bool]
    ) -> T:
        """``stopped()``: the exporter was shut down meanwhile (at exit), so a failure is no outage."""
        with _captured_warnings(self._loggers) as reasons:
            self.in_flight_reasons = reasons  # what the exporter said so far (retries), read at exit
            try:
                result = export()
            except Exception as exc:
                reasons.insert(0, f"{type(exc).__name__}: {exc}")
                result = failure
            finally:
                self.in_flight_reasons = None
        ok = succeeded(result)
        if ok or not stopped():
            self._record(ok, reasons)
        return result

    def _record(self, ok: bool, reasons: Sequence[str]) -> None:
        with _down_lock:
            failing = _down.setdefault(self._receiver, set())
            was_down = bool(failing)
            if ok:
                failing.discard(self._what)
            else:
                failing.add(self._what)
            down = bool(failing)
        if not ok:
            # the exporter's own words, which quote the endpoint and its credentials
            reason = redact(
                plain_reason(" ".join((reasons[0] if reasons else "the exporter reported a failure").split()))
            )
            self.last_reason = (
                reason[: _REASON_LENGTH - 3] + "..." if len(reason) > _REASON_LENGTH else reason
            )
        if was_down and not down:
            _LOG.info("otel-handoff: exporting to %s again", self._target)
        elif down and not was_down:
            _LOG.warning(
                "otel-handoff: cannot export %s to %s (%s); the application is unaffected, telemetry "
                "for it is dropped until it answers again, further failures are not logged; %s",
                self._what,
                self._target,
                self.last_reason,
                what_to_check(self._signal, self.last_reason),
            )


class QuietSpanExporter(SpanExporter):
    """A span exporter whose failures are logged once per outage."""

    def __init__(self, inner: SpanExporter, outage: Outage) -> None:
        self._inner = inner
        self._outage = outage
        self._shut = False
        self.target, self.endpoint = outage.target, outage.endpoint
        self.ended = 0  # spans handed to its processor (see export.exit.CountingSpanProcessor)
        self.exported = 0  # spans the receiver accepted
        self.failed = 0  # spans it did not
        self.in_flight = False  # an export is waiting for the receiver's answer

    @property
    def undelivered(self) -> int:
        """Spans that ended and never reached the receiver: failed, in flight or still queued."""
        return max(self.ended - self.exported, self.failed)

    @property
    def last_failure(self) -> str | None:
        """Why exporting fails: what the export in flight said so far (its retries), or the last failure."""
        pending = self._outage.in_flight_reasons
        if pending:
            return redact(plain_reason(_RETRYING.sub("", " ".join(pending[0].split()))))[:_REASON_LENGTH]
        return self._outage.last_reason

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut:
            self.failed += len(spans)
            return SpanExportResult.FAILURE
        self.in_flight = True
        try:
            result = self._outage.run(
                lambda: self._inner.export(spans),
                lambda result: result is SpanExportResult.SUCCESS,
                SpanExportResult.FAILURE,
                lambda: self._shut,
            )
        finally:
            self.in_flight = False
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        return result

    @property
    def outage_down(self) -> bool:
        return self._outage.down

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        if not self._shut:  # once: the exit timer and the provider may both ask
            self._shut = True
            self._inner.shutdown()


class QuietMetricExporter(MetricExporter):
    """A metric exporter whose failures are logged once per outage."""

    def __init__(self, inner: MetricExporter, outage: Outage) -> None:
        # the periodic reader reads these from its exporter; take the wrapped one's
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._outage = outage
        self._shut = False
        self.target, self.endpoint = outage.target, outage.endpoint

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self._shut:
            return MetricExportResult.FAILURE
        return self._outage.run(
            lambda: self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            lambda result: result is MetricExportResult.SUCCESS,
            MetricExportResult.FAILURE,
            lambda: self._shut,
        )

    @property
    def outage_down(self) -> bool:
        return self._outage.down

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if not self._shut:  # once: the exit timer and the provider may both ask
            self._shut = True
            self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


def quiet(signal: Signal, exporter: Any, target: str) -> Any:
    outage = Outage(signal, exporter, target)
    if signal == "traces":
        return QuietSpanExporter(exporter, outage)
    return QuietMetricExporter(exporter, outage)
