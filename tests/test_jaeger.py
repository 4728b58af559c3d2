"""Handoffs in a real Jaeger v2: every framework, over OTLP gRPC and HTTP, read back as the UI reads them.

Jaeger v2.13 (built from source by ``.ci/install-receivers.sh``) runs
``collector-config/jaeger/config.yaml`` unchanged in a network namespace of its own. Each test
sends what a user sends (``otel-handoff demo --framework F`` in a subprocess, or an app's
scenario with the standard OTLP exporter) and reads it back through ``/api/traces?service=…``
(the UI's search) and ``/api/v3/traces/{id}`` (OTLP/JSON), comparing every span with what the
same run wrote locally: ids, parents, links, status, ``error.type`` and our attributes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from framework_runs import FRAMEWORK_RUNS, framework_instrumentors
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from receivers import Rotel, Span, request_spans, run_demo, wait_until
from stack import Jaeger, as_jaeger_tags, namespace

from otel_handoff.cli import main
from otel_handoff.core import schema as sc
from otel_handoff.export import otlp_json

PROTOCOLS = ["grpc", "http/protobuf"]
DEMOS = {  # framework -> the framework's own span each handoff hangs under, at its trace's root
    "livekit": "agent_session",
    "ag2": "network.envelope",  # AG2's envelope spans: roots, linked to their channel's
    "pipecat": sc.SPAN_CHAT,
    "openai-agents": None,  # the realtime handoff is a root; the text chain hangs off our chat root
    "google-adk": "invoke_",  # ADK's invoke_workflow (text, node runtime) and invoke_agent (live)
    "langgraph": None,  # LangGraph makes no spans: each handoff is a root without an app span
    "llama-index": None,  # LlamaIndex makes no OpenTelemetry spans: each handoff is a root, likewise
    "strands": "invoke_swarm",  # Strands' own swarm span (its tracing on the demo's provider)
    "agent-framework": "workflow.run",  # the framework's own run span (its tracing on the demo's provider)
}
# Jaeger keeps span times in microseconds (start and duration each truncated): a duration read
# back may differ from the exported one by less than 2 µs
JAEGER_TIME_TOLERANCE_S = 2e-6


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    space = namespace(tmp_path_factory.mktemp("jaeger"))
    try:
        yield Jaeger.start(space)
    finally:
        space.stop()


def service_name(what: str) -> str:
    return f"handoff-{what.replace('/', '-')}-{uuid.uuid4().hex[:6]}"


def endpoint_env(jaeger: Jaeger, protocol: str) -> dict[str, str]:
    endpoint = jaeger.grpc_endpoint if protocol == "grpc" else jaeger.http_endpoint
    # Jaeger takes traces only: no metrics exporter, as a user pointing at Jaeger alone sets it
    return {
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
    }


def arrived_in_jaeger(jaeger: Jaeger, service: str, expected: list[Span]) -> list[Span]:
    wanted = {s["span_id"] for s in expected}

    def complete() -> list[Span] | None:
        spans = jaeger.spans(service)
        return spans if wanted <= {s["span_id"] for s in spans} else None

    return wait_until(complete, f"{len(wanted)} spans in Jaeger", timeout=30, every=0.2)


def ancestors(span: Span, by_id: dict[str, Span]) -> list[str]:
    names = []
    while span["parent_id"] is not None:
        span = by_id[span["parent_id"]]
        names.append(span["name"])
    return names


def check_same_spans(expected: list[Span], received: list[Span], *, jaeger_tags: bool) -> None:
    """Every expected span came back: same trace, parent, name, links; ours with the same
    attributes and status, ERROR ones with ``error.type``; each handoff with its phase children
    and under the same chain of framework spans."""
    got = {s["span_id"]: s for s in received}
    for span in expected:
        back = got[span["span_id"]]
        where = f"{span['name']} {span['span_id']}"
        assert (back["trace_id"], back["parent_id"], back["name"]) == (
            span["trace_id"],
            span["parent_id"],
            span["name"],
        ), where
        assert back["links"] == span["links"], where
        if span["name"].startswith(sc.SPAN_HANDOFF):
            attributes = as_jaeger_tags(span["attributes"]) if jaeger_tags else span["attributes"]
            assert back["attributes"] == attributes, where
            assert back["status"] == span["status"], where
            if span["status"] == "ERROR":
                assert back["attributes"][sc.ERROR_TYPE], where
    sent = {s["span_id"]: s for s in expected}
    for handoff in (s for s in expected if s["name"] == sc.SPAN_HANDOFF):
        children = sorted(s["name"] for s in expected if s["parent_id"] == handoff["span_id"])
        back_children = sorted(s["name"] for s in received if s["parent_id"] == handoff["span_id"])
        assert back_children == children, handoff["attributes"]
        assert ancestors(got[handoff["span_id"]], got) == ancestors(handoff, sent)


def check_in_jaeger(jaeger: Jaeger, service: str, expected: list[Span]) -> list[Span]:
    """Both of Jaeger's read paths give back what was sent."""
    received = arrived_in_jaeger(jaeger, service, expected)
    check_same_spans(expected, received, jaeger_tags=True)
    for trace_id in sorted({s["trace_id"] for s in expected}):
        in_trace = [s for s in expected if s["trace_id"] == trace_id]
        check_same_spans(in_trace, jaeger.spans_v3(trace_id), jaeger_tags=False)
    return received


# --- the demos, as a user runs them ------------------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("framework", sorted(DEMOS))
def test_demo_handoffs_in_jaeger(jaeger: Jaeger, tmp_path: Path, framework: str, protocol: str) -> None:
    service = service_name(f"{framework}-{protocol}")
    run = run_demo(tmp_path, framework, OTEL_SERVICE_NAME=service, **endpoint_env(jaeger, protocol))
    assert run.handoffs(), "the demo made no handoff"
    assert run.stderr == "", run.stderr
    received = check_in_jaeger(jaeger, service, run.exported)
    by_id = {s["span_id"]: s for s in received}
    roots = {(ancestors(h, by_id) or [None])[-1] for h in received if h["name"] == sc.SPAN_HANDOFF}
    if DEMOS[framework] is not None:
        # nested under the framework's own spans in one Jaeger trace (LiveKit 1.8 telemetry, AG2's)
        assert roots and all(root.startswith(DEMOS[framework]) for root in roots), roots
    linked = {s["name"] for s in received if s["links"]}
    if framework == "livekit":
        assert {sc.SPAN_FIRST_SPEECH, sc.SPAN_RECONNECT} <= linked, linked
    if framework == "pipecat":
        assert sc.SPAN_FIRST_SPEECH in linked, linked


def test_demo_through_rotel_to_jaeger(jaeger: Jaeger, tmp_path: Path) -> None:
    """collector-config/rotel.md's forwarding to Jaeger, run: demo -> rotel -> Jaeger."""
    forwarder = Rotel.start(tmp_path / "rotel", forward_to=jaeger.grpc_endpoint)
    try:
        service = service_name("via-rotel")
        run = run_demo(
            tmp_path,
            OTEL_SERVICE_NAME=service,
            OTEL_EXPORTER_OTLP_ENDPOINT=forwarder.grpc_endpoint,
            OTEL_METRICS_EXPORTER="none",
        )
        check_in_jaeger(jaeger, service, run.exported)
    finally:
        forwarder.stop()


# --- failed, skipped and rejected handoffs, from an app's own provider ------------------------------
def app_provider(service: str, exporter: Any, *scans: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    for scan in scans:
        provider.add_span_processor(scan)
    return provider, memory


def span_exporter(jaeger: Jaeger, protocol: str) -> Any:
    if protocol == "grpc":
        return GrpcSpanExporter(endpoint=jaeger.grpc_endpoint, insecure=True)
    return HttpSpanExporter(endpoint=f"{jaeger.http_endpoint}/v1/traces")


def as_spans(memory: InMemorySpanExporter) -> list[Span]:
    """What the app's provider made, through the one OTLP/JSON encoder and reader."""
    finished = memory.get_finished_spans()
    document = json.loads(json.dumps(otlp_json.encode(finished)))
    return request_spans(otlp_json.parse_request(document))


@pytest.fixture
def livekit_telemetry_on() -> Iterator[Callable[[TracerProvider], None]]:
    """Point LiveKit's own tracer at a provider for one test, then back at the suite's."""
    from conftest import PROVIDER
    from livekit.agents.telemetry import set_tracer_provider

    yield set_tracer_provider
    set_tracer_provider(PROVIDER)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_failed_skipped_and_rejected_handoffs_in_jaeger(
    jaeger: Jaeger,
    protocol: str,
    instrument: Any,
    privacy_scan: Any,
    convention_scan: Any,
    livekit_telemetry_on: Callable[[TracerProvider], None],
) -> None:

    service = service_name(f"outcomes-{protocol}")
    provider, memory = app_provider(service, span_exporter(jaeger, protocol), privacy_scan, convention_scan)
    livekit_telemetry_on(provider)
    for instrumentor in framework_instrumentors():
        instrument(instrumentor, tracer_provider=provider)
    for run in FRAMEWORK_RUNS.values():
        run()
    assert provider.force_flush(30_000)
    expected = as_spans(memory)
    provider.shutdown()
    received = check_in_jaeger(jaeger, service, expected)
    outcomes = {
        (s["attributes"][sc.FRAMEWORK], s["attributes"][sc.OUTCOME], s["status"])
        for s in received
        if s["name"] == sc.SPAN_HANDOFF
    }
    for framework, outcome in [
        ("livekit-agents", sc.OUTCOME_SKIPPED),
        ("ag2", sc.OUTCOME_ERROR),
        ("pipecat-flows", sc.OUTCOME_SKIPPED),
        ("openai-agents", sc.OUTCOME_REJECTED),
        ("openai-agents", sc.OUTCOME_ERROR),
        ("langgraph", sc.OUTCOME_REJECTED),
        ("langgraph", sc.OUTCOME_ERROR),
    ]:
        assert any(f == framework and o == outcome for f, o, _ in outcomes), (framework, outcome, outcomes)
    failed = (sc.OUTCOME_ERROR, sc.OUTCOME_REJECTED)
    assert all((status == "ERROR") == (o in failed) for _, o, status in outcomes), outcomes


def test_openai_sdk_handoff_nested_under_openinference_in_jaeger(
    jaeger: Jaeger, instrument: Any, privacy_scan: Any, convention_scan: Any
) -> None:
    """The SDK's own tracing, as openinference exports it: ours hangs under its spans, one trace."""
    import asyncio

    openinference = pytest.importorskip("openinference.instrumentation.openai_agents")
    from otel_handoff.cli.offline import openai_agents as oa
    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

    service = service_name("openinference")
    provider, memory = app_provider(service, span_exporter(jaeger, "grpc"), privacy_scan, convention_scan)
    theirs = openinference.OpenAIAgentsInstrumentor()
    theirs.instrument(tracer_provider=provider)
    instrument(OpenAIAgentsHandoffInstrumentor, tracer_provider=provider)
    try:
        asyncio.run(oa.run_text(oa.TextScenario(chain=True), "streamed"))
    finally:
        theirs.uninstrument()
    assert provider.force_flush(30_000)
    expected = as_spans(memory)
    provider.shutdown()
    received = check_in_jaeger(jaeger, service, expected)
    by_id = {s["span_id"]: s for s in received}
    handoffs = [s for s in received if s["name"] == sc.SPAN_HANDOFF]
    assert len(handoffs) == 2
    scopes = {s["span_id"]: s["attributes"] for s in jaeger.spans_v3(handoffs[0]["trace_id"])}
    for handoff in handoffs:
        parent = by_id[handoff["parent_id"]]
        assert not parent["name"].startswith(sc.SPAN_HANDOFF), parent["name"]
        assert parent["trace_id"] == handoff["trace_id"]
        assert parent["span_id"] in scopes  # openinference's span, in the same Jaeger trace


# --- otel-handoff summary, pointed at Jaeger ---------------------------------------------------------
def summary_json(capsys: pytest.CaptureFixture[str], source: str | Path) -> dict[str, Any]:
    assert main(["summary", str(source), "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def close_figures(a: Any, b: Any, where: str = "") -> None:
    """Equal, but for durations (floats), which may differ by Jaeger's microsecond rounding."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            close_figures(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            close_figures(x, y, f"{where}[{n}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert abs(a - b) <= JAEGER_TIME_TOLERANCE_S, (where, a, b)
    else:
        assert a == b, (where, a, b)


@pytest.mark.parametrize("framework", sorted(DEMOS))
def test_summary_reads_jaeger_as_it_reads_the_export_file(
    jaeger: Jaeger, tmp_path: Path, framework: str, capsys: pytest.CaptureFixture[str]
) -> None:
    service = service_name(f"summary-{framework}")
    run = run_demo(tmp_path, framework, OTEL_SERVICE_NAME=service, **endpoint_env(jaeger, "grpc"))
    arrived_in_jaeger(jaeger, service, run.exported)
    export_file = next(tmp_path.glob("demo-*.jsonl"))
    from_file = summary_json(capsys, export_file)
    from_jaeger = summary_json(capsys, jaeger.traces_url(service))
    assert from_file["handoffs"] == from_jaeger["handoffs"] == len(run.handoffs())
    close_figures(from_file["pairs"], from_jaeger["pairs"], "pairs")
