"""``configure()``: export handoff traces with the standard ``OTEL_*`` variables, in one call.

An agent process often has no OpenTelemetry SDK set up, so its spans go nowhere. This sets
up the SDK the way the OpenTelemetry specification's environment variables describe, and
nothing else: the OTLP exporters read their endpoint, headers, timeout and certificates
themselves, ``Resource.create()`` reads ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES``,
``TracerProvider`` reads the sampler and ``BatchSpanProcessor`` its ``OTEL_BSP_*`` limits.
What is added here is what an agent in production needs from it:

* a value the SDK would reject or misread is checked first and reported in one log line
  naming the variable and what it accepts; that exporter is left off, the app keeps running;
* an export that fails (receiver down, wrong port) logs one warning, not one per batch, and
  one line when export works again;
* a provider the application installed is never replaced, and LiveKit's own spans are put
  on the same provider, so they land in the same traces as the handoff spans.

The package, by job: :mod:`.settings` checks the variables, :mod:`.exporters` builds the
exporters they name, :mod:`.quiet` keeps a failing receiver to one log line, :mod:`.exit` bounds
the exit; this module makes the providers.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from ..core import delivery as _delivery
from ..core import faults as _faults
from . import exporters as _exporters
from .exit import EXIT_TIMEOUT_SECONDS, CountingSpanProcessor, ExitReport, shutdown_at_exit, shutdown_within
from .exporters import exporters, problems
from .settings import Problem, report_problem, resource, sdk_disabled

__all__ = [
    "EXIT_TIMEOUT_SECONDS",
    "Configuration",
    "CountingSpanProcessor",
    "ExitReport",
    "Problem",
    "configure",
    "exporters",
    "problems",
    "resource",
    "sdk_disabled",
    "shutdown_within",
]

_LOG = logging.getLogger("otel_handoff")


@dataclass(frozen=True)
class Configuration:
    """What :func:`configure` set up.

    ``tracer_provider`` is the provider spans go to (the application's own when it had
    installed one, then ``created`` is False); call its ``force_flush()`` before a
    short-lived process exits early, its ``shutdown()`` runs at interpreter exit anyway.
    ``span_exporters`` and ``metric_exporters`` describe what configure attached, e.g.
    ``("otlp/grpc http://127.0.0.1:4317",)``.
    """

    tracer_provider: trace.TracerProvider
    meter_provider: metrics.MeterProvider
    created: bool
    span_exporters: tuple[str, ...] = ()
    metric_exporters: tuple[str, ...] = ()
    disabled: bool = False


_lock = threading.Lock()
_configured: Configuration | None = None


def configure(
    *, service_name: str | None = None, instrument: bool = True, phase_metrics: bool | None = None
) -> Configuration:
    """Set up OpenTelemetry export from the standard ``OTEL_*`` variables; idempotent.

    When the application has not installed an SDK ``TracerProvider``, this creates one (and
    a ``MeterProvider``) whose exporters ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``
    choose (``otlp``, the default, ``console`` or ``none``; OTLP over
    ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`` ``grpc``, the default, or ``http/protobuf``),
    exporting in a background thread (``BatchSpanProcessor``) and flushing at interpreter
    exit. ``OTEL_SDK_DISABLED=true`` turns all of it off. ``service_name`` is used when
    ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` name no service.
    ``OTEL_METRICS_EXPORTER=none`` installs no ``MeterProvider`` at all (LiveKit Cloud then
    keeps its own metrics); set it for backends that take no metrics, such as Phoenix.

    LiveKit's own telemetry is pointed at the same provider unless the application already
    chose one for it (``livekit.agents.telemetry.set_tracer_provider``). With ``instrument``
    (the default), LiveKit Agents handoffs are instrumented too, when livekit-agents is
    installed. ``phase_metrics=False`` (or ``OTEL_HANDOFF_PHASE_METRICS=false``) records no
    per-phase metric points: the handoffs' own duration points and every span stay. Never raises:
    a bad setting is logged, and tracing stays off where it applies.
    """
    global _configured
    with _lock:
        if _configured is None:
            try:
                _configured = _configure(service_name)
            except Exception as exc:  # an app must not die of its telemetry set-up
                _faults.report("configure()", exc)
                return Configuration(trace.get_tracer_provider(), metrics.get_meter_provider(), created=False)
        configuration = _configured
    if instrument and not configuration.disabled:
        _faults.guard("configure(instrument=True)", _instrument_frameworks, configuration, phase_metrics)
    return configuration


def _configure(service_name: str | None) -> Configuration:
    report_problem.reset()
    if sdk_disabled():
        return Configuration(
            trace.get_tracer_provider(), metrics.get_meter_provider(), created=False, disabled=True
        )
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        _LOG.debug("otel-handoff: using the tracer provider the application installed")
        _share_with_livekit(current)
        return Configuration(current, metrics.get_meter_provider(), created=False)

    resource_ = resource(service_name)
    # flushed when a conversation ends and at the process's end, however it ends (core.delivery),
    # within EXIT_TIMEOUT_SECONDS, not the SDK's unbounded way
    tracer_provider = TracerProvider(resource=resource_, shutdown_on_exit=False)
    span_names: list[str] = []
    span_exporters_built = _exporters.build_exporters("traces")
    for name, exporter in span_exporters_built:
        tracer_provider.add_span_processor(CountingSpanProcessor(exporter))
        span_names.append(name)
    trace.set_tracer_provider(tracer_provider)
    if trace.get_tracer_provider() is not tracer_provider:  # another thread won the set-once global
        tracer_provider.shutdown()
        winner = trace.get_tracer_provider()
        _share_with_livekit(winner)
        return Configuration(winner, metrics.get_meter_provider(), created=False)
    meter_provider, metric_names, metric_exporters_built = _meter_provider(resource_)
    _share_with_livekit(tracer_provider)
    exits = [e for _, e in (*span_exporters_built, *metric_exporters_built)]
    # at interpreter exit, and where a job process ends without it (multiprocessing's finalizers)
    _delivery.at_process_end(
        functools.partial(shutdown_at_exit, tracer_provider, meter_provider, exits),
        shuts_down=tracer_provider,
    )
    return Configuration(
        tracer_provider,
        meter_provider,
        created=True,
        span_exporters=tuple(span_names),
        metric_exporters=tuple(metric_names),
    )


def _meter_provider(resource: Resource) -> tuple[metrics.MeterProvider, list[str], list[tuple[str, Any]]]:
    current = metrics.get_meter_provider()
    if not _is_unset_meter_provider(current):
        return current, [], []
    built = _exporters.build_exporters("metrics")
    if not built:
        # no global MeterProvider then: LiveKit Cloud, for one, installs its own only if none is set
        return current, [], []
    provider = MeterProvider(
        resource=resource,
        metric_readers=[PeriodicExportingMetricReader(e) for _, e in built],
        shutdown_on_exit=False,  # shut down with the tracer provider, at the process's end
    )
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        provider.shutdown()
        return metrics.get_meter_provider(), [], []
    return provider, [name for name, _ in built], built


def _is_unset_meter_provider(provider: metrics.MeterProvider) -> bool:
    # the API's proxy has no public name; LiveKit's telemetry checks the same class
    return type(provider).__name__ == "_ProxyMeterProvider"


# --- LiveKit -------------------------------------------------------------------------------------
def _share_with_livekit(provider: trace.TracerProvider) -> None:
    """Point LiveKit's telemetry at ``provider`` unless the application set one for it."""
    traces = sys.modules.get("livekit.agents.telemetry.traces")
    if traces is None:
        # not imported yet: on import, LiveKit's tracer starts from the global provider, ours
        return
    current = getattr(getattr(traces, "tracer", None), "_tracer_provider", None)
    if current is provider:
        return
    if not isinstance(current, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        # LiveKit's own check for "the integrator set one" (livekit.agents.telemetry.traces)
        _LOG.info(
            "otel-handoff: LiveKit's telemetry already has its own tracer provider; leaving it "
            "(LiveKit's spans go there, handoff spans to the global provider)"
        )
        return
    from livekit.agents.telemetry import set_tracer_provider

    set_tracer_provider(provider)


def _instrument_frameworks(configuration: Configuration, phase_metrics: bool | None = None) -> None:
    """Handoff tracing for every installed framework (LiveKit Agents, AG2), on our providers."""
    from .. import _auto
    from ..core.frameworks import FRAMEWORKS

    for framework in FRAMEWORKS:
        if _auto.installed(framework) is None:
            continue
        instrumentor = _auto.instrumentor_class(framework)()
        if not instrumentor.is_instrumented_by_opentelemetry:
            options = {} if phase_metrics is None else {"phase_metrics": phase_metrics}
            instrumentor.instrument(
                tracer_provider=configuration.tracer_provider,
                meter_provider=configuration.meter_provider,
                **options,
            )
