"""otel_handoff.configure(): the SDK set up from the standard OTEL_* variables, safely.

Each test starts from a process that has no OpenTelemetry provider installed (the API's
set-once globals are reset around it) and no OTEL_* variables set.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from livekit.agents import AgentSession
from livekit.agents.telemetry import traces as livekit_traces
from lk_agents import Billing, Support
from opentelemetry import metrics, trace
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from support import assert_exit_bounded, run_exit_app

import otel_handoff
from otel_handoff import _auto, export
from otel_handoff.cli.offline.livekit import ScriptedLLM
from otel_handoff.core import delivery
from otel_handoff.core import schema as sc
from otel_handoff.core.frameworks import FRAMEWORKS
from otel_handoff.export import exit as export_exit
from otel_handoff.export import quiet as export_quiet
from otel_handoff.livekit import LiveKitHandoffInstrumentor

REPO = Path(__file__).resolve().parents[1]


# --- a process with nothing installed ------------------------------------------------------------
def _reset_globals() -> None:
    """Undo what configure() did to the process: providers, globals, LiveKit, instrumentation."""
    configured = export._configured
    if configured is not None and configured.created:
        configured.tracer_provider.shutdown()
        if isinstance(configured.meter_provider, MeterProvider):
            configured.meter_provider.shutdown()
    for framework in FRAMEWORKS:  # configure() instruments every installed framework
        instrumentor = _auto.instrumentor_class(framework)()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    export._configured = None
    delivery.unregister(export_exit.shutdown_at_exit)  # done above, for the providers it created
    # the API's set-once globals, as opentelemetry-test-utils resets them
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    metrics_internal._PROXY_METER_PROVIDER = metrics_internal._ProxyMeterProvider()
    livekit_traces.tracer.set_provider(trace.ProxyTracerProvider())


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key in [k for k in os.environ if k.startswith(("OTEL_", "LIVEKIT_TELEMETRY"))]:
        monkeypatch.delenv(key)
    saved_livekit = livekit_traces.tracer._tracer_provider
    _reset_globals()
    yield
    _reset_globals()
    livekit_traces.tracer.set_provider(saved_livekit)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, fresh: None) -> pytest.MonkeyPatch:
    """Set OTEL_* variables for the test: ``env.setenv(...)``."""
    return monkeypatch


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- import and API -------------------------------------------------------------------------------
def test_import_stays_cheap() -> None:
    code = (
        "import sys, otel_handoff; "
        "assert not [m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'livekit'))], 'eager'; "
        "from otel_handoff import configure, Configuration; "
        "assert 'opentelemetry.sdk.trace' in sys.modules; print(configure.__name__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "configure"
    assert otel_handoff.configure is export.configure
    with pytest.raises(AttributeError):
        otel_handoff.no_such_thing  # noqa: B018


def test_creates_sdk_providers_with_otlp_by_default(env: pytest.MonkeyPatch) -> None:
    configuration = otel_handoff.configure(instrument=False)
    assert configuration.created and not configuration.disabled
    assert isinstance(configuration.tracer_provider, TracerProvider)
    assert trace.get_tracer_provider() is configuration.tracer_provider
    assert isinstance(configuration.meter_provider, MeterProvider)
    assert metrics.get_meter_provider() is configuration.meter_provider
    # the Python SDK's defaults: OTLP over gRPC to localhost:4317
    assert configuration.span_exporters == ("otlp/grpc http://localhost:4317",)
    assert configuration.metric_exporters == ("otlp/grpc http://localhost:4317",)
    assert otel_handoff.configure() is configuration, "a second call changes nothing"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}, ("otlp/grpc http://127.0.0.1:4317",)),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
            ("otlp/http/protobuf http://c:4318/v1/traces",),
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://base:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example:443/custom/path",
            },
            ("otlp/http/protobuf https://traces.example:443/custom/path",),
        ),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",)),
        ({"OTEL_TRACES_EXPORTER": "none"}, ()),
        ({"OTEL_TRACES_EXPORTER": "console, otlp"}, ("console", "otlp/grpc http://localhost:4317")),
        (
            {"OTEL_TRACES_EXPORTER": "otlp_proto_http"},
            ("otlp/http/protobuf http://localhost:4318/v1/traces",),
        ),
    ],
)
def test_exporter_chosen_by_standard_variables(
    env: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    variables: dict[str, str],
    expected: tuple[str, ...],
) -> None:
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    for key, value in variables.items():
        env.setenv(key, value)
    configuration = otel_handoff.configure(instrument=False)
    assert configuration.span_exporters == expected
    assert not problems(caplog)


class _Receiver(http.server.ThreadingHTTPServer):
    """A minimal OTLP/HTTP receiver: records each request's path, headers and decoded spans."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], ExportTraceServiceRequest]] = []

        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(
                    (self.path, dict(self.headers), ExportTraceServiceRequest.FromString(body))
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def otlp_http_receiver() -> Iterator[_Receiver]:
    receiver = _Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.shutdown()
    receiver.server_close()
    thread.join(5)


def test_exporter_reads_endpoint_headers_and_resource_from_the_environment(
    env: pytest.MonkeyPatch, otlp_http_receiver: _Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    port = otlp_http_receiver.server_address[1]
    env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret,x-team=voice%20agents")
    env.setenv("OTEL_SERVICE_NAME", "checkout-agent")
    env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,service.name=ignored")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    configuration = otel_handoff.configure(service_name="fallback-name", instrument=False)
    with trace.get_tracer("test").start_as_current_span("handoff-like"):
        pass
    assert configuration.tracer_provider.force_flush(10_000)
    ((path, headers, request),) = otlp_http_receiver.requests
    assert path == "/v1/traces"
    assert headers["api-key"] == "s3cret" and headers["x-team"] == "voice agents"
    resource = {a.key: a.value.string_value for a in request.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "checkout-agent", "OTEL_SERVICE_NAME wins, as the spec says"
    assert resource["deployment.environment"] == "test"
    assert request.resource_spans[0].scope_spans[0].spans[0].name == "handoff-like"
    assert not problems(caplog)


def test_service_name_is_a_fallback(env: pytest.MonkeyPatch) -> None:
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    configuration = otel_handoff.configure(service_name="my-agent", instrument=False)
    assert configuration.tracer_provider.resource.attributes["service.name"] == "my-agent"


# --- invalid values: one line naming the variable, the app keeps running -------------------------
@pytest.mark.parametrize(
    ("variable", "value", "accepted"),
    [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "grpc or http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift", "grpc or http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4317", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://:4317", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://collector:43x7", "http://127.0.0.1:4317"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret,broken", "name=value"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "=s3cret", "name=value"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "number of seconds"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zip", "gzip"),
        ("OTEL_TRACES_EXPORTER", "jaeger", "otlp, console, otel_handoff_file or none"),
        ("OTEL_SDK_DISABLED", "yes", "true or false"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team=voice,oops", "key=value"),
    ],
)
def test_invalid_value_is_one_line_naming_the_variable(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str, value: str, accepted: str
) -> None:
    env.setenv(variable, value)
    env.setenv("OTEL_METRICS_EXPORTER", "otlp")  # the shared variables affect metrics too: still one line
    caplog.set_level(logging.DEBUG)
    configuration = otel_handoff.configure(instrument=False)  # never raises

    (record,) = problems(caplog)
    message = record.getMessage()
    assert record.name == "otel_handoff" and record.levelno == logging.ERROR
    assert variable in message and accepted in message
    assert "\n" not in message
    assert "s3cret" not in message, "header values (API keys) must not be logged"
    assert configuration.created, "tracing itself stays set up"
    if variable.startswith("OTEL_EXPORTER_OTLP") or variable == "OTEL_TRACES_EXPORTER":
        assert configuration.span_exporters == (), "that exporter is off"


def test_a_signal_variable_overrides_the_shared_one(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")  # no scheme: invalid
    env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317")
    configuration = otel_handoff.configure(instrument=False)
    assert configuration.span_exporters == ("otlp/grpc http://127.0.0.1:4317",)
    assert configuration.metric_exporters == (), "metrics read the shared, invalid one"
    (record,) = problems(caplog)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT " in record.getMessage()


def test_exception_inside_configure_does_not_escape(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("resource detection exploded")

    env.setattr(export.settings.Resource, "create", broken)
    configuration = otel_handoff.configure(instrument=False)
    assert not configuration.created
    (record,) = problems(caplog)
    assert "configure()" in record.getMessage() and "exploded" in record.getMessage()


# --- whose provider ---------------------------------------------------------------------------------
def test_sdk_disabled_sets_nothing_up(env: pytest.MonkeyPatch) -> None:
    env.setenv("OTEL_SDK_DISABLED", "TRUE")
    configuration = otel_handoff.configure()
    assert configuration.disabled and not configuration.created
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not LiveKitHandoffInstrumentor().is_instrumented_by_opentelemetry


def test_application_provider_is_never_replaced(env: pytest.MonkeyPatch) -> None:
    app_provider = TracerProvider()
    trace.set_tracer_provider(app_provider)
    configuration = otel_handoff.configure(instrument=False)
    assert configuration.tracer_provider is app_provider and not configuration.created
    assert trace.get_tracer_provider() is app_provider
    assert livekit_traces.tracer._tracer_provider is app_provider, "LiveKit joins the app's provider"
    app_provider.shutdown()


def test_livekit_uses_the_same_provider(env: pytest.MonkeyPatch) -> None:
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    configuration = otel_handoff.configure(instrument=False)
    assert livekit_traces.tracer._tracer_provider is configuration.tracer_provider


def test_livekit_provider_chosen_by_the_app_is_kept(env: pytest.MonkeyPatch) -> None:
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    livekit_choice = TracerProvider()
    livekit_traces.tracer.set_provider(livekit_choice)
    configuration = otel_handoff.configure(instrument=False)
    assert configuration.created
    assert livekit_traces.tracer._tracer_provider is livekit_choice
    livekit_choice.shutdown()


def test_metrics_none_leaves_the_meter_provider_unset(env: pytest.MonkeyPatch) -> None:
    """So LiveKit Cloud, which installs its own only when none is set, keeps its metrics."""
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    configuration = otel_handoff.configure(instrument=False)
    assert not isinstance(configuration.meter_provider, MeterProvider)
    assert type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **env},
        cwd=REPO,
    )


def test_livekit_imported_after_configure_follows_it() -> None:
    result = run_python(
        """
        import otel_handoff
        configuration = otel_handoff.configure(instrument=False)
        from livekit.agents.telemetry import traces
        assert traces.tracer._tracer_provider is configuration.tracer_provider
        print("ok")
        """,
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_spans_still_batched_are_flushed_at_exit() -> None:
    result = run_python(
        """
        import otel_handoff
        otel_handoff.configure(instrument=False)
        from opentelemetry import trace
        with trace.get_tracer("t").start_as_current_span("still-in-the-batch"):
            pass
        # no flush, no shutdown: the interpreter exits with the span queued
        """,
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_BSP_SCHEDULE_DELAY="600000",
    )
    assert result.returncode == 0, result.stderr
    assert '"name": "still-in-the-batch"' in result.stdout


def test_spans_and_metrics_to_one_receiver_share_its_outage(caplog: pytest.LogCaptureFixture) -> None:
    spans, spans_ok = _Flaky(), _Flaky()
    spans_ok.ok = True
    target = f"http://collector-{id(spans)}:4317"
    span_exporter = export_quiet.quiet("traces", spans, target)
    # the same receiver, another signal
    metric_side = export_quiet.QuietSpanExporter(spans_ok, export_quiet.Outage("metrics", spans_ok, target))
    span_exporter.export([])
    metric_side.export([])  # metrics still get through: the receiver is still down for spans
    spans_ok.ok = False
    metric_side.export([])
    assert [r.levelname for r in caplog.records] == ["WARNING"]


# --- failing exports: one warning, off the event loop ----------------------------------------------
class _Flaky(SpanExporter):
    """Fails (logging as exporters do) until told to succeed."""

    log = logging.getLogger(__name__)  # as exporters log: through their module's logger

    def __init__(self) -> None:
        self.ok = False

    def export(self, spans: Any) -> SpanExportResult:
        if self.ok:
            return SpanExportResult.SUCCESS
        self.log.warning("Transient error, retrying")
        self.log.error("Failed to export spans: connection refused")
        return SpanExportResult.FAILURE


def test_outage_is_logged_once_and_recovery_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    inner = _Flaky()
    target = f"http://collector-{id(inner)}:4317"
    exporter = export_quiet.quiet("traces", inner, target)
    for _ in range(5):
        assert exporter.export([]) is SpanExportResult.FAILURE
    inner.ok = True
    assert exporter.export([]) is SpanExportResult.SUCCESS
    assert exporter.export([]) is SpanExportResult.SUCCESS
    inner.ok = False
    exporter.export([])
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["WARNING", "INFO", "WARNING"], messages
    warning = messages[0][1]
    assert target in warning and "Transient error, retrying" in warning
    assert f"exporting to {target} again" in messages[1][1]
    # the exporter's own lines are swallowed only inside our export calls
    _Flaky.log.warning("outside an export")
    assert caplog.records[-1].getMessage() == "outside an export"


async def handoffs(count: int) -> None:
    """A real offline AgentSession handing off ``count`` times (update_agent)."""
    session = AgentSession(llm=ScriptedLLM())
    await session.start(agent=Billing())
    try:
        for n in range(count):
            agent = Support() if n % 2 == 0 else Billing()
            session.update_agent(agent)
            await asyncio.wait_for(agent.entered.wait(), 10)
    finally:
        await session.aclose()


def handoff_spans(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in memory.get_finished_spans() if s.name == sc.SPAN_HANDOFF]


def configured_with_memory() -> tuple[export.Configuration, InMemorySpanExporter]:
    configuration = otel_handoff.configure()  # instruments LiveKit too
    memory = InMemorySpanExporter()
    assert isinstance(configuration.tracer_provider, TracerProvider)
    configuration.tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    return configuration, memory


async def test_unreachable_endpoint_costs_handoffs_nothing_and_warns_once(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env.setenv("OTEL_METRICS_EXPORTER", "none")
    # baseline: the same handoffs with no exporter
    env.setenv("OTEL_TRACES_EXPORTER", "none")
    _, memory = configured_with_memory()
    await handoffs(6)
    baseline = [s.attributes[sc.DURATION] for s in handoff_spans(memory)]
    assert len(baseline) == 6
    _reset_globals()

    # OTLP to a port nothing listens on; export as soon as a span ends; ~1 s of retries per export
    env.delenv("OTEL_TRACES_EXPORTER")
    env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    env.setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
    env.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    exports: list[tuple[int, int, SpanExportResult]] = []
    running: list[int] = []  # start times of the exports in flight
    quiet_export = export_quiet.QuietSpanExporter.export

    def timed_export(self: Any, spans: Any) -> SpanExportResult:
        start = time.time_ns()
        running.append(start)
        try:
            result = quiet_export(self, spans)
        finally:
            running.remove(start)
        exports.append((start, time.time_ns(), result))
        return result

    async def until(condition: Any, what: str) -> None:
        deadline = time.monotonic() + 15
        while not condition() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert condition(), what

    env.setattr(export_quiet.QuietSpanExporter, "export", timed_export)
    caplog.clear()
    configuration, memory = configured_with_memory()
    await handoffs(3)
    # the first export has failed (its retries run in the exporter's thread, not on this loop)
    await until(lambda: exports, "no export was attempted")
    # one more handoff starts an export; the last two run while it is blocked in its retries
    before = time.time_ns()
    await handoffs(1)
    await until(lambda: any(start >= before for start in running), "no export of the next handoff")
    await handoffs(2)
    await asyncio.to_thread(configuration.tracer_provider.force_flush, 10_000)

    spans = handoff_spans(memory)
    assert len(spans) == 6 and all(s.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED for s in spans)
    assert len(exports) >= 2 and all(result is SpanExportResult.FAILURE for *_, result in exports)
    # handoffs ran while an export was blocked in its retries, and took no longer for it
    slow_exports = [(start, end) for start, end, _ in exports if end - start > 500_000_000]
    assert slow_exports, "the exports did not block (is the endpoint reachable?)"
    assert any(start < s.end_time < end for s in spans for start, end in slow_exports)
    # no handoff waited for an export: each took less than the shortest blocked export
    durations = [s.attributes[sc.DURATION] for s in spans]
    shortest_block = min(end - start for start, end in slow_exports) / 1e9
    assert max(durations) < shortest_block, (durations, shortest_block)

    (warning,) = problems(caplog)
    assert warning.name == "otel_handoff"
    assert os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] in warning.getMessage()
    assert "\n" not in warning.getMessage()


# --- exit with a collector that does not answer -------------------------------------------------
def test_exit_with_a_dead_collector_is_bounded_and_says_what_was_lost() -> None:
    with socket.socket() as listener:  # bound, never accepting: nobody answers on this port
        listener.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{listener.getsockname()[1]}"
        _, result = run_exit_app(OTEL_EXPORTER_OTLP_ENDPOINT=dead)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-2000:]
    lost = [line for line in result.stderr.splitlines() if "not delivered" in line]
    assert len(lost) == 1 and "3 span(s)" in lost[0], result.stderr
    # the SDK's own exit waits out its retries (10 s export timeout); ours waits 1.5 s at most,
    # read off the exit's own waits (a loaded machine's clock would only blur it)
    assert_exit_bounded(result.stderr)
