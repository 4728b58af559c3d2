"""A bounded exit: a receiver that does not answer costs a process about a second, not ~15 s."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider

from .quiet import QuietSpanExporter

_LOG = logging.getLogger("otel_handoff")

EXIT_TIMEOUT_SECONDS = 1.0  # what an unanswering collector may add to a process's exit


def shutdown_within(
    tracer_provider: Any, meter_provider: Any, exporters: Sequence[Any], timeout: float = EXIT_TIMEOUT_SECONDS
) -> int:
    """Flush and shut both providers down, giving exporters that do not answer ``timeout`` seconds.

    The SDK's own shutdown waits out every retry of an unreachable collector (about 15 s);
    here an exporter whose receiver is already in an outage is shut down at once, the others
    once ``timeout`` has passed, which ends their retries and in-flight calls. Returns how many
    spans were not delivered.
    """
    for exporter in exporters:
        if getattr(exporter, "outage_down", False):
            exporter.shutdown()
    timer = threading.Timer(timeout, lambda: [exporter.shutdown() for exporter in exporters])
    timer.daemon = True
    timer.start()
    try:
        tracer_provider.shutdown()
        if isinstance(meter_provider, MeterProvider):
            meter_provider.shutdown()
    finally:
        timer.cancel()
    return sum(e.failed for e in exporters if isinstance(e, QuietSpanExporter))


def shutdown_at_exit(tracer_provider: Any, meter_provider: Any, exporters: Sequence[Any]) -> None:
    undelivered = shutdown_within(tracer_provider, meter_provider, exporters)
    if undelivered:
        _LOG.warning(
            "otel-handoff: %d span(s) were not delivered: the exporter did not succeed before exit "
            "(each is given %.0f s at exit).",
            undelivered,
            EXIT_TIMEOUT_SECONDS,
        )
