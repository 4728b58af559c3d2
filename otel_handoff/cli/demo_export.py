"""What every ``otel-handoff demo`` shares, whatever the framework: where its spans go.

Spans go to memory (for the waterfall), to an OTLP endpoint when ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and to an OTLP JSON Lines file on request.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ..export import CountingSpanProcessor, exporters, otlp_json, shutdown_within
from ..export.file import append
from ..export.settings import what_to_check

DEFAULT_SERVICE_NAME = "otel-handoff-demo"


class DemoSetupError(Exception):
    """The demo cannot start as configured (an OTLP setting, the export file)."""


# --- tracing -----------------------------------------------------------------------------------
def _otlp_requested() -> bool:
    """The demo exports over OTLP only when an endpoint is set (it runs fine without one)."""
    return any(
        os.environ.get(variable, "").strip()
        for variable in (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        )
    )


def _resource() -> Resource:
    """``Resource.create()`` (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), with a demo name."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def write_otlp_json(spans: Sequence[ReadableSpan], path: str | os.PathLike[str]) -> None:
    """Write ``spans`` to ``path`` as OTLP JSON Lines, replacing it: what the file exporter
    (``OTEL_TRACES_EXPORTER=otel_handoff_file``) appends, one ``ExportTraceServiceRequest`` per trace."""
    Path(path).write_bytes(b"")
    append(os.fspath(path), "".join(otlp_json.json_lines(spans)).encode("utf-8"))


@dataclass
class DemoResult:
    """What a demo run produced. Call :meth:`shutdown` once done, to flush OTLP export."""

    spans: tuple[ReadableSpan, ...]
    provider: TracerProvider
    meter_provider: MeterProvider | None
    stt_streams: int = 0
    realtime_sessions: int = 0
    export_path: str | None = None
    otlp_target: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # conversation id -> what it shows
    # another process's spans of these handoffs (a remote agent's server): shown, not exported here
    served: tuple[ReadableSpan, ...] = ()
    _otlp: Any | None = field(default=None, repr=False)
    _exporters: tuple[Any, ...] = field(default=(), repr=False)  # every OTLP exporter, span and metric

    def shutdown(self) -> str | None:
        """Flush and shut the provider down; return one line saying where spans went, if anywhere."""
        # whatever the collector does, the exit waits about EXIT_TIMEOUT_SECONDS at most
        report = shutdown_within(self.provider, self.meter_provider, self._exporters)
        where: list[str] = []
        lost = ""
        if self._otlp is not None and self.otlp_target is not None:
            if self._otlp.exported:
                where.append(f"{self.otlp_target} ({self._otlp.exported} spans)")
            if report.undelivered:
                lost = (
                    f"{report.undelivered} spans not delivered to {self.otlp_target} ({report.why}); "
                    f"{what_to_check('traces')}"
                )
        if self.export_path is not None:
            where.append(f"{self.export_path} ({len(self.spans)} spans, OTLP JSON Lines)")
        lines = [f"spans exported to {'; '.join(where)}" if where else "", lost]
        return "\n".join(line for line in lines if line) or None


@dataclass
class DemoTracing:
    """The providers of one demo run: memory always, OTLP when an endpoint is set."""

    provider: TracerProvider
    memory: InMemorySpanExporter
    meter_provider: MeterProvider | None
    export_path: str | None
    otlp: Any | None
    otlp_target: str | None
    exporters: tuple[Any, ...]

    @classmethod
    def create(cls, export_path: str | os.PathLike[str] | None) -> DemoTracing:
        """Check the export file and the ``OTEL_*`` settings before the run, not after it."""
        if export_path is not None:
            try:
                Path(export_path).open("w", encoding="utf-8").close()
            except OSError as exc:
                raise DemoSetupError(f"cannot write {os.fspath(export_path)}: {exc.strerror or exc}") from exc
        provider = TracerProvider(resource=_resource(), shutdown_on_exit=False)  # DemoResult.shutdown
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        otlp: Any | None = None
        otlp_target: str | None = None
        meter_provider: MeterProvider | None = None
        spans_out, metrics_out = exporters(build=_otlp_requested())  # bad settings: one line each
        if spans_out or metrics_out:
            for description, exporter in spans_out:
                otlp, otlp_target = exporter, description  # counts what was delivered
                provider.add_span_processor(CountingSpanProcessor(otlp))
            readers = [PeriodicExportingMetricReader(exporter) for _, exporter in metrics_out]
            if readers:  # the handoff metrics too, for the Grafana dashboard
                meter_provider = MeterProvider(
                    resource=provider.resource, metric_readers=readers, shutdown_on_exit=False
                )
        path = os.fspath(export_path) if export_path is not None else None
        built = tuple(exporter for _, exporter in (*spans_out, *metrics_out))
        return cls(provider, memory, meter_provider, path, otlp, otlp_target, built)

    @contextlib.contextmanager
    def instrumented(
        self, instrumentor: BaseInstrumentor, framework: str, *, global_provider: bool = False
    ) -> Iterator[None]:
        """``instrumentor`` on the demo's providers for the run, uninstrumented after it.

        ``global_provider``: the framework traces on the global provider; when the app set none,
        the demo's becomes it, so each handoff shows inside the framework's own trace.
        """
        if instrumentor.is_instrumented_by_opentelemetry:
            raise RuntimeError(f"the demo instruments {framework} itself: uninstrument it first")
        if global_provider and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            trace.set_tracer_provider(self.provider)
        instrumentor.instrument(tracer_provider=self.provider, meter_provider=self.meter_provider)
        try:
            yield
        finally:
            instrumentor.uninstrument()

    def result(self, served: Sequence[ReadableSpan] = (), **counts: Any) -> DemoResult:
        """The finished spans, also written to the export file if one was asked for; ``served``,
        another process's (read back from its own file), only for the waterfall: each process
        exports its own."""
        spans = tuple(self.memory.get_finished_spans())
        if self.export_path is not None:
            write_otlp_json(spans, self.export_path)
        return DemoResult(
            spans=spans,
            provider=self.provider,
            meter_provider=self.meter_provider,
            export_path=self.export_path,
            otlp_target=self.otlp_target,
            _otlp=self.otlp,
            _exporters=self.exporters,
            served=tuple(served),
            **counts,
        )
