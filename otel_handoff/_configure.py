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
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from .core import faults as _faults

__all__ = ["Configuration", "configure", "metric_exporters", "span_exporters"]

_LOG = logging.getLogger("otel_handoff")

Signal = Literal["traces", "metrics"]
T = TypeVar("T")

_ENTRY_POINT_GROUP: dict[Signal, str] = {
    "traces": "opentelemetry_traces_exporter",
    "metrics": "opentelemetry_metrics_exporter",
}
# as the SDK's own configurator maps OTEL_EXPORTER_OTLP_PROTOCOL (grpc is its default)
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_PROTOCOL_BY_OTLP = {name: protocol for protocol, name in _OTLP_BY_PROTOCOL.items()}
_DEFAULT_ENDPOINT = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
# what each OTLP exporter accepts in OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION
_COMPRESSIONS = {"grpc": ("gzip",), "http/protobuf": ("gzip", "deflate", "none")}
_HTTP_PATH: dict[Signal, str] = {"traces": "v1/traces", "metrics": "v1/metrics"}
_WHAT: dict[Signal, str] = {"traces": "spans", "metrics": "metrics"}

# the liberal header syntax the OTLP exporters parse (opentelemetry.util.re): name=value
_HEADER = re.compile(
    r"[ \t]*[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*=[ \t]*"
    r"[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*"
)
_HEADERS_ACCEPTED = "use comma-separated name=value pairs, values URL-encoded, e.g. 'api-key=abc,team=a%20b'"
_REASON_LENGTH = 300


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


def configure(*, service_name: str | None = None, instrument: bool = True) -> Configuration:
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
    installed. Never raises: a bad setting is logged, and tracing stays off where it applies.
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
        _faults.guard("configure(instrument=True)", _instrument_frameworks, configuration)
    return configuration


def _configure(service_name: str | None) -> Configuration:
    _problems.reset()
    if _sdk_disabled():
        return Configuration(
            trace.get_tracer_provider(), metrics.get_meter_provider(), created=False, disabled=True
        )
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        _LOG.debug("otel-handoff: using the tracer provider the application installed")
        _share_with_livekit(current)
        return Configuration(current, metrics.get_meter_provider(), created=False)

    resource = _resource(service_name)
    # flushed at exit by _shutdown_at_exit, within EXIT_TIMEOUT_SECONDS, not the SDK's unbounded way
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    span_names: list[str] = []
    span_exporters_built = _exporters("traces")
    for name, exporter in span_exporters_built:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
        span_names.append(name)
    trace.set_tracer_provider(tracer_provider)
    if trace.get_tracer_provider() is not tracer_provider:  # another thread won the set-once global
        tracer_provider.shutdown()
        winner = trace.get_tracer_provider()
        _share_with_livekit(winner)
        return Configuration(winner, metrics.get_meter_provider(), created=False)
    meter_provider, metric_names, metric_exporters_built = _meter_provider(resource)
    _share_with_livekit(tracer_provider)
    exits = [e for _, e in (*span_exporters_built, *metric_exporters_built)]
    atexit.register(_shutdown_at_exit, tracer_provider, meter_provider, exits)
    return Configuration(
        tracer_provider,
        meter_provider,
        created=True,
        span_exporters=tuple(span_names),
        metric_exporters=tuple(metric_names),
    )


# --- the environment ---------------------------------------------------------------------------
class Problem(NamedTuple):
    """A setting that cannot be used: the variable, what is wrong, what it accepts, what follows."""

    variable: str
    problem: str
    accepted: str
    consequence: str


class _Problems:
    """Report each invalid variable once per set-up: one line, naming it and what it accepts.

    The same facts are kept as :class:`Problem` values, which ``otel-handoff doctor`` reads.
    """

    def __init__(self) -> None:
        self.found: list[Problem] = []
        self.log = True

    def reset(self, *, log: bool = True) -> None:
        self.found = []
        self.log = log

    def __call__(self, variable: str, problem: str, accepted: str, consequence: str) -> None:
        if any(found.variable == variable for found in self.found):
            return
        self.found.append(Problem(variable, problem, accepted, consequence))
        if not self.log:
            return
        _LOG.error(
            "otel-handoff: %s %s: %s. %s; the application keeps running.",
            variable,
            problem,
            accepted,
            consequence,
        )


_problems = _Problems()


def _first(*variables: str) -> tuple[str, str] | None:
    """The first of ``variables`` that is set and not blank, as (name, stripped value)."""
    for variable in variables:
        value = os.environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


def _sdk_disabled() -> bool:
    setting = _first("OTEL_SDK_DISABLED")
    if setting is None or setting[1].lower() == "false":
        return False
    if setting[1].lower() == "true":
        return True
    _problems(
        setting[0],
        f"is {setting[1]!r}",
        "use true or false",
        "Read as false, as the SDK does: telemetry is on",
    )
    return False


def _resource(service_name: str | None) -> Resource:
    setting = _first("OTEL_RESOURCE_ATTRIBUTES")
    if setting and any("=" not in entry for entry in setting[1].split(",")):
        _problems(
            setting[0],
            "has entries that are not key=value",
            "use comma-separated key=value pairs, e.g. 'deployment.environment=prod,team=voice'",
            "Those entries are ignored",
        )
        # ours says it once; the SDK would say it per entry, each time it reads the variable
        logging.getLogger("opentelemetry.sdk.resources").addFilter(_not_a_resource_pair_warning)
    resource = Resource.create()
    if service_name and str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    return resource


def _not_a_resource_pair_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Invalid key value resource attribute pair")


def _url_problem(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http:// or https:// URL"
    return None


def _headers_problem(value: str) -> str | None:
    entries = [entry for entry in re.split(r"[ \t]*,[ \t]*", value) if entry]
    bad = [n for n, entry in enumerate(entries, 1) if not _HEADER.fullmatch(entry)]
    if bad:  # never the values: headers carry API keys
        return f"is malformed (entry {bad[0]} of {len(entries)})"
    return None


def _compression_problem(protocol: str, value: str) -> str | None:
    return None if value.lower() in _COMPRESSIONS[protocol] else f"is {value!r}"


def _timeout_problem(value: str) -> str | None:
    try:
        ok = float(value) > 0
    except ValueError:
        ok = False
    return None if ok else f"is {value!r}"


def _otlp_settings(signal: Signal, protocol_override: str | None) -> tuple[str, str] | None:
    """(protocol, endpoint) for OTLP export of ``signal``, or None when a setting is invalid."""
    infix = signal.upper()

    def off(variable: str) -> str:
        return f"OTLP export of {signal} is off" if f"_{infix}_" in variable else "OTLP export is off"

    if protocol_override is not None:
        protocol = protocol_override
    else:
        setting = _first(f"OTEL_EXPORTER_OTLP_{infix}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
        protocol = setting[1] if setting else "grpc"
        if setting and protocol not in _OTLP_BY_PROTOCOL:
            _problems(setting[0], f"is {protocol!r}", "use grpc or http/protobuf", off(setting[0]))
            return None

    # as the exporters read them: the signal's own variable, else the shared one
    signal_endpoint = _first(f"OTEL_EXPORTER_OTLP_{infix}_ENDPOINT")
    base_endpoint = _first("OTEL_EXPORTER_OTLP_ENDPOINT")
    setting = signal_endpoint or base_endpoint
    if setting and (problem := _url_problem(setting[1])):
        accepted = "use a URL like http://127.0.0.1:4317"
        _problems(setting[0], f"{problem}: {setting[1]!r}", accepted, off(setting[0]))
        return None
    checks: list[tuple[str, Callable[[str], str | None], str]] = [
        ("HEADERS", _headers_problem, _HEADERS_ACCEPTED),
        ("TIMEOUT", _timeout_problem, "use a number of seconds greater than 0"),
        (
            "COMPRESSION",
            lambda value: _compression_problem(protocol, value),
            f"the {protocol} exporter takes {' or '.join(_COMPRESSIONS[protocol])} (or leave it unset)",
        ),
    ]
    for suffix, check, accepted in checks:
        setting = _first(f"OTEL_EXPORTER_OTLP_{infix}_{suffix}", f"OTEL_EXPORTER_OTLP_{suffix}")
        if setting and (problem := check(setting[1])):
            _problems(setting[0], problem, accepted, off(setting[0]))
            return None

    # where the exporter will send, as it resolves it (for the log lines and the summary)
    if signal_endpoint:
        endpoint = signal_endpoint[1]
    elif protocol == "http/protobuf":
        endpoint = f"{(base_endpoint[1] if base_endpoint else _DEFAULT_ENDPOINT[protocol]).rstrip('/')}/"
        endpoint += _HTTP_PATH[signal]
    else:
        endpoint = base_endpoint[1] if base_endpoint else _DEFAULT_ENDPOINT[protocol]
    return protocol, endpoint


def _exporter_class(signal: Signal, name: str) -> type[Any] | None:
    for entry_point in entry_points(group=_ENTRY_POINT_GROUP[signal], name=name):
        return entry_point.load()
    return None


def _exporters(signal: Signal) -> list[tuple[str, Any]]:
    """(description, exporter) for each exporter OTEL_{TRACES,METRICS}_EXPORTER names."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    names = [n.strip().lower() for n in os.environ.get(variable, "").split(",") if n.strip()] or ["otlp"]
    built: list[tuple[str, Any]] = []
    for name in dict.fromkeys(names):
        if name == "none":
            continue
        if name == "otlp" or name in _PROTOCOL_BY_OTLP:
            settings = _otlp_settings(signal, _PROTOCOL_BY_OTLP.get(name))
            if settings is None:
                continue
            protocol, target = settings
            entry_name, description = _OTLP_BY_PROTOCOL[protocol], f"otlp/{protocol} {target}"
        else:
            entry_name, description, target = name, name, name
        cls = _exporter_class(signal, entry_name)
        if cls is None:
            installed = sorted({ep.name for ep in entry_points(group=_ENTRY_POINT_GROUP[signal])})
            _problems(
                variable,
                f"names {name!r}, which is not installed",
                f"use otlp, console or none (installed: {', '.join(installed) or 'none'})",
                f"That {signal} exporter is off",
            )
            continue
        try:
            exporter = cls()  # each reads its own OTEL_EXPORTER_* settings
        except Exception as exc:
            _problems(
                variable,
                f"selects {name!r}, which failed to start ({type(exc).__name__}: {exc})",
                "check that exporter's OTEL_EXPORTER_* settings",
                f"That {signal} exporter is off",
            )
            continue
        built.append((description, _quiet(signal, exporter, target)))
    return built


def problems() -> list[Problem]:
    """The settings the last set-up (:func:`configure`, :func:`exporters`) could not use."""
    return list(_problems.found)


def span_exporters() -> list[tuple[str, SpanExporter]]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` asks for, as (description, exporter).

    Each is checked as :func:`configure` describes and logs a failing export once. For a
    program that builds its own provider (add each with a ``BatchSpanProcessor``).
    """
    _problems.reset()
    return _exporters("traces")


def metric_exporters() -> list[tuple[str, MetricExporter]]:
    """The metric exporters ``OTEL_METRICS_EXPORTER`` asks for, as (description, exporter)."""
    _problems.reset()
    return _exporters("metrics")


def exporters(
    *, build: bool = True, log: bool = True
) -> tuple[list[tuple[str, SpanExporter]], list[tuple[str, MetricExporter]]]:
    """Span and metric exporters together, each bad setting reported once for both.

    ``build=False`` only checks the settings (each problem still reported once) and builds
    nothing: for a program that exports only when an endpoint is set. ``log=False`` logs
    nothing: :func:`problems` then says what is wrong.
    """
    _problems.reset(log=log)
    if not build:
        for signal in ("traces", "metrics"):
            _otlp_settings(signal, None)
        return [], []
    return _exporters("traces"), _exporters("metrics")


def _meter_provider(resource: Resource) -> tuple[metrics.MeterProvider, list[str], list[tuple[str, Any]]]:
    current = metrics.get_meter_provider()
    if not _is_unset_meter_provider(current):
        return current, [], []
    exporters = _exporters("metrics")
    if not exporters:
        # no global MeterProvider then: LiveKit Cloud, for one, installs its own only if none is set
        return current, [], []
    provider = MeterProvider(
        resource=resource,
        metric_readers=[PeriodicExportingMetricReader(e) for _, e in exporters],
        shutdown_on_exit=False,  # _shutdown_at_exit
    )
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        provider.shutdown()
        return metrics.get_meter_provider(), [], []
    return provider, [name for name, _ in exporters], exporters


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


def _instrument_frameworks(configuration: Configuration) -> None:
    """Handoff tracing for every installed framework (LiveKit Agents, AG2), on our providers."""
    from . import _auto

    for framework in _auto.FRAMEWORKS:
        if _auto.installed(framework) is None:
            continue
        instrumentor = _auto.instrumentor_class(framework)()
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument(
                tracer_provider=configuration.tracer_provider, meter_provider=configuration.meter_provider
            )


# --- a bounded exit -------------------------------------------------------------------------------
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
    return sum(e.failed for e in exporters if isinstance(e, _QuietSpanExporter))


def _shutdown_at_exit(tracer_provider: Any, meter_provider: Any, exporters: Sequence[Any]) -> None:
    undelivered = shutdown_within(tracer_provider, meter_provider, exporters)
    if undelivered:
        _LOG.warning(
            "otel-handoff: %d span(s) were not delivered: the exporter did not succeed before exit "
            "(each is given %.0f s at exit).",
            undelivered,
            EXIT_TIMEOUT_SECONDS,
        )


# --- one warning per outage ----------------------------------------------------------------------
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
    _capture.sink = sink = []
    try:
        yield sink
    finally:
        _capture.sink = previous


_down: dict[str, set[str]] = {}  # receiver (host:port) -> what fails to reach it: "spans", "metrics"
_down_lock = threading.Lock()


class _Outage:
    """Logs when exports to a receiver start failing and when they work again, nothing between.

    Spans and metrics sent to the same receiver share its outage: one warning when it goes away.
    """

    def __init__(self, signal: Signal, exporter: object, target: str) -> None:
        self._what = _WHAT[signal]
        self._target = target
        self._receiver = urlsplit(target).netloc or target
        # exporters log through their modules' loggers (getLogger(__name__)), base classes' too
        self._loggers = sorted({cls.__module__ for cls in type(exporter).__mro__} - {"builtins", "abc"})

    @property
    def down(self) -> bool:
        """The receiver's last export failed: it is in an outage."""
        with _down_lock:
            return bool(_down.get(self._receiver))

    def run(self, export: Callable[[], T], succeeded: Callable[[T], bool], failure: T) -> T:
        with _captured_warnings(self._loggers) as reasons:
            try:
                result = export()
            except Exception as exc:
                reasons.insert(0, f"{type(exc).__name__}: {exc}")
                result = failure
        self._record(succeeded(result), reasons)
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
        if was_down and not down:
            _LOG.info("otel-handoff: exporting to %s again", self._target)
        elif down and not was_down:
            reason = " ".join((reasons[0] if reasons else "the exporter reported a failure").split())
            if len(reason) > _REASON_LENGTH:
                reason = reason[: _REASON_LENGTH - 3] + "..."
            _LOG.warning(
                "otel-handoff: cannot export %s to %s (%s); the application is unaffected, telemetry "
                "for it is dropped until it answers again, further failures are not logged",
                self._what,
                self._target,
                reason,
            )


class _QuietSpanExporter(SpanExporter):
    """A span exporter whose failures are logged once per outage."""

    def __init__(self, inner: SpanExporter, outage: _Outage) -> None:
        self._inner = inner
        self._outage = outage
        self._shut = False
        self.exported = 0  # spans the receiver accepted
        self.failed = 0  # spans it did not

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut:
            self.failed += len(spans)
            return SpanExportResult.FAILURE
        result = self._outage.run(
            lambda: self._inner.export(spans),
            lambda result: result is SpanExportResult.SUCCESS,
            SpanExportResult.FAILURE,
        )
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


class _QuietMetricExporter(MetricExporter):
    """A metric exporter whose failures are logged once per outage."""

    def __init__(self, inner: MetricExporter, outage: _Outage) -> None:
        # the periodic reader reads these from its exporter; take the wrapped one's
        super().__init__(
            preferred_temporality=inner._preferred_temporality,
            preferred_aggregation=inner._preferred_aggregation,
        )
        self._inner = inner
        self._outage = outage
        self._shut = False

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self._shut:
            return MetricExportResult.FAILURE
        return self._outage.run(
            lambda: self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs),
            lambda result: result is MetricExportResult.SUCCESS,
            MetricExportResult.FAILURE,
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


def _quiet(signal: Signal, exporter: Any, target: str) -> Any:
    outage = _Outage(signal, exporter, target)
    if signal == "traces":
        return _QuietSpanExporter(exporter, outage)
    return _QuietMetricExporter(exporter, outage)
