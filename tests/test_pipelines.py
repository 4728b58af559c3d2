"""The collector pipelines we ship, run unchanged on real engines: every ``otelcol-*.yaml``, tail
sampling at scale, a late failure in a long call, and the exemplar loop from Prometheus to Jaeger.

One network namespace holds what docker-compose would run: Jaeger v2.13 on ``jaeger``, a second
Jaeger on ``tempo`` standing in for Grafana Tempo (not in our test tools for its licence; it only
receives what the collector sends there), ``otelcol-handoff`` (our ocb build) on
``otel-collector`` and Debian's Prometheus on ``prometheus``, each on the ports the files name.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import netns
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from receivers import Span, run_demo, wait_until
from stack import CONFIG_DIR, NO_INTERNAL_TELEMETRY, Collector, Jaeger, Prometheus, namespace
from test_jaeger import as_spans, check_same_spans

from otel_handoff.core import schema as sc

TAIL_SAMPLING = CONFIG_DIR / "otelcol-tail-sampling.yaml"
TAIL_SAMPLING_HANDOFFS = CONFIG_DIR / "otelcol-tail-sampling-handoffs.yaml"


@dataclass
class Stack:
    space: netns.Namespace
    jaeger: Jaeger
    tempo: Jaeger  # a Jaeger where Tempo would be

    def collector(self, config: Path, *overrides: str) -> Collector:
        return Collector.start(self.space, config, *overrides)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    space = namespace(tmp_path_factory.mktemp("stack"))
    try:
        jaeger = Jaeger.start(space)
        tempo = Jaeger.start(space, "tempo", NO_INTERNAL_TELEMETRY)
        yield Stack(space, jaeger, tempo)
    finally:
        space.stop()


def in_jaeger(jaeger: Jaeger, service: str, expected: list[Span], timeout: float = 30) -> list[Span]:
    wanted = {s["span_id"] for s in expected}

    def complete() -> list[Span] | None:
        spans = jaeger.spans(service, limit=5000)
        return spans if wanted <= {s["span_id"] for s in spans} else None

    return wait_until(complete, f"{len(wanted)} spans of {service} in {jaeger.log.stem}", timeout, every=0.25)


# --- every shipped pipeline runs ------------------------------------------------------------------
@pytest.mark.parametrize("config", ["otelcol-jaeger.yaml", "otelcol-jaeger-tempo.yaml", "otelcol-tempo.yaml"])
def test_shipped_pipeline_runs(stack: Stack, tmp_path: Path, config: str) -> None:
    """The demo's spans through the collector reach each backend the file names, intact; its
    handoff metrics come out of the Prometheus exporter in OpenMetrics."""
    path = CONFIG_DIR / config
    collector = stack.collector(path)
    try:
        service = f"pipeline-{path.stem}-{uuid.uuid4().hex[:6]}"
        run = run_demo(
            tmp_path,
            "pipecat",
            OTEL_SERVICE_NAME=service,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.grpc_endpoint,
        )
        assert run.stderr == "", run.stderr
        backends = {"jaeger": stack.jaeger, "tempo": stack.tempo}
        targets = {name for name in backends if f"otlp/{name}:" in path.read_text()}
        assert targets, config
        for name in targets:
            check_same_spans(run.exported, in_jaeger(backends[name], service, run.exported), jaeger_tags=True)
        for name in set(backends) - targets:
            assert backends[name].trace_ids(service) == set(), f"{config} sent spans to {name}"
        metrics = wait_until(
            lambda: next((t for t in [collector.metrics_text()] if service in t), None),
            "the handoff metrics at the collector's Prometheus exporter",
        )
        assert "agent_handoff_duration_seconds_count{" in metrics
        assert metrics.rstrip().endswith("# EOF"), "not OpenMetrics"
    finally:
        netns.stop(collector.process)


# --- tail sampling at scale ------------------------------------------------------------------------
def binomial_bounds(n: int, p: float, tail: float = 1e-6) -> tuple[int, int]:
    """The smallest and largest counts outside of which Binomial(n, p) falls with probability < tail
    on each side."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    low, below = 0, 0.0
    while below + pmf[low] < tail:
        below += pmf[low]
        low += 1
    high, above = n, 0.0
    while above + pmf[high] < tail:
        above += pmf[high]
        high -= 1
    return low, high


@dataclass
class Conversations:
    expected: list[Span]
    kinds: dict[str, str]  # trace id -> fast, slow or failed


def run_conversations(
    endpoint: str, service: str, fast: int, slow: int, failed: int, instrument: Any
) -> Conversations:
    """That many OpenAI Agents SDK runs, each a trace of its own with one handoff: fast, slower than
    the policy's 0.5 s (a 0.6 s on_handoff) or failed (a raising on_handoff); all at once."""
    from otel_handoff.cli.offline import openai_agents as oa
    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=200_000, max_export_batch_size=1024)
    )
    instrument(OpenAIAgentsHandoffInstrumentor, tracer_provider=provider)
    oa.quiet_sdk_tracing()
    quick = [oa.TextScenario() for _ in range(fast)] + [
        oa.TextScenario(raising_on_handoff=True) for _ in range(failed)
    ]
    slow_ones = [oa.TextScenario(on_handoff_delay=0.6) for _ in range(slow)]

    async def conversation(scenario: oa.TextScenario) -> None:
        try:
            await oa.run_text(scenario)
        except LookupError:
            assert scenario.raising_on_handoff

    async def everyone() -> None:
        # a few at a time, as calls come in: 480 at once on one event loop would make each slow
        for start in range(0, fast + failed, 8):
            await asyncio.gather(*(conversation(s) for s in [*quick][start : start + 8]))
        await asyncio.gather(*(conversation(s) for s in slow_ones))  # these sleep: all at once

    asyncio.run(everyone())
    assert provider.force_flush(60_000)
    expected = as_spans(memory)
    provider.shutdown()
    kinds: dict[str, str] = {}
    for span in expected:
        if span["name"] != sc.SPAN_HANDOFF:
            continue
        if span["status"] == "ERROR":
            kinds[span["trace_id"]] = "failed"
        elif span["attributes"][sc.DURATION] > 0.5:
            kinds[span["trace_id"]] = "slow"
        else:
            kinds.setdefault(span["trace_id"], "fast")
    # what the policy sees decides: a fast run that a loaded machine made slow counts as slow
    counts = {kind: sum(1 for k in kinds.values() if k == kind) for kind in ("fast", "slow", "failed")}
    assert len(kinds) == fast + slow + failed and counts["failed"] == failed, counts
    assert counts["slow"] >= slow and counts["fast"] >= fast // 2, counts
    return Conversations(expected, kinds)


def test_tail_sampling_keeps_every_slow_and_failed_trace_whole(stack: Stack, instrument: Any) -> None:
    """The shipped policies, unchanged (30 s decision_wait, 10 %): 480 conversations through a real
    framework; every trace with a slow or failed handoff kept whole, fast ones at 10 %."""
    collector = stack.collector(TAIL_SAMPLING)
    try:
        service = f"tail-{uuid.uuid4().hex[:6]}"
        rss_before, cpu_before = collector.rss_bytes(), collector.cpu_seconds()
        sent = run_conversations(
            collector.grpc_endpoint, service, fast=400, slow=40, failed=40, instrument=instrument
        )
        held = collector.rss_bytes() - rss_before  # every trace held, none decided yet
        must_keep = {t for t, kind in sent.kinds.items() if kind != "fast"}
        by_trace: dict[str, set[str]] = {}
        for span in sent.expected:
            by_trace.setdefault(span["trace_id"], set()).add(span["span_id"])

        def kept_whole() -> dict[str, set[str]] | None:
            stored: dict[str, set[str]] = {}
            for span in stack.jaeger.spans(service, limit=5000):
                stored.setdefault(span["trace_id"], set()).add(span["span_id"])
            return stored if all(stored.get(t) == by_trace[t] for t in must_keep) else None

        started = time.monotonic()
        stored = wait_until(kept_whole, "every slow and failed trace in Jaeger", timeout=120, every=0.5)
        cpu = collector.cpu_seconds() - cpu_before  # receiving, holding, deciding, exporting
        fast_kept = {t for t in stored if sent.kinds[t] == "fast"}
        for trace in fast_kept:
            assert stored[trace] == by_trace[trace], "a fast trace kept, but not whole"
        fast_sent = sum(1 for kind in sent.kinds.values() if kind == "fast")
        low, high = binomial_bounds(fast_sent, 0.10)
        assert low <= len(fast_kept) <= high, (len(fast_kept), (low, high))
        print(
            f"\ntail sampling: {len(must_keep)} slow/failed kept whole of {len(must_keep)}; fast kept "
            f"{len(fast_kept)}/{fast_sent} (bounds {low}..{high}); "
            f"decided after {time.monotonic() - started:.1f} s; "
            f"collector RSS +{held / 1e6:.1f} MB holding 480 conversations "
            f"({held / 480 / 1e3:.1f} kB each, {len(sent.expected) / 480:.1f} spans each); "
            f"collector CPU {cpu:.2f} s for {len(sent.expected)} spans "
            f"({cpu / len(sent.expected) * 1e6:.0f} µs a span)"
        )
    finally:
        netns.stop(collector.process)


# --- a long call that fails late: what decision_wait does to it --------------------------------------
def long_call_failing_late(provider: TracerProvider, gap: float) -> None:
    """A LiveKit voice call, one trace from start to end: a fast handoff at once, ``gap`` seconds of
    conversation, then a handoff whose realtime session refuses the new agent's context (an ERROR
    phase), then the call ends."""
    from livekit.agents import AgentSession, llm
    from lk_agents import Billing, Support

    from otel_handoff.cli.offline.livekit import IdleRealtimeModel

    async def call() -> None:
        refused = llm.RealtimeError("provider refused the chat context")
        model = IdleRealtimeModel(mutable=True)
        session = AgentSession(llm=model)
        await session.start(agent=Billing("You are A."))
        try:
            support = Support("You are B.")
            session.update_agent(support)
            await asyncio.wait_for(support.entered.wait(), 10)
            await asyncio.sleep(gap)  # the call going on: the scenario's own time, not a wait for an event
            model.update_errors["chat_ctx"] = refused
            billing = Billing("You are C.")
            session.update_agent(billing)
            await asyncio.wait_for(session._update_activity_atask, 10)
        finally:
            await session.aclose()

    with tracer_for_livekit(provider):
        asyncio.run(call())


@contextlib.contextmanager
def tracer_for_livekit(provider: TracerProvider) -> Iterator[None]:
    from conftest import PROVIDER
    from livekit.agents.telemetry import set_tracer_provider

    set_tracer_provider(provider)
    try:
        yield
    finally:
        set_tracer_provider(PROVIDER)


def sentinel_run(provider: TracerProvider) -> None:
    """One failed OpenAI Agents SDK run after everything else: kept by the policies, so once it is in
    Jaeger every earlier span's fate is settled (it arrived later and was decided later)."""
    from otel_handoff.cli.offline import openai_agents as oa

    oa.quiet_sdk_tracing()
    with contextlib.suppress(LookupError):
        asyncio.run(oa.run_text(oa.TextScenario(raising_on_handoff=True)))


LATE_CASES = {  # id -> collector file, its decision_wait (None: as shipped), the call's quiet gap (s)
    "shipped-30s": (TAIL_SAMPLING, None, 3.0),
    "shipped-failure-after-decision_wait": (TAIL_SAMPLING, 2, 5.0),
    "handoffs-always-failure-after-decision_wait": (TAIL_SAMPLING_HANDOFFS, 2, 5.0),
}


@pytest.mark.parametrize("case", list(LATE_CASES))
def test_late_failure_in_a_long_call(stack: Stack, instrument: Any, case: str) -> None:
    """One LiveKit call, one trace, failing ``gap`` seconds in. Within decision_wait the whole call is
    kept; after it, the shipped file keeps all of it or none (the call's early decision, 10 %), and
    otelcol-tail-sampling-handoffs.yaml keeps the failing handoff whatever was decided."""
    from otel_handoff.livekit import LiveKitHandoffInstrumentor
    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

    config, decision_wait, gap = LATE_CASES[case]
    overrides = [f"--set=processors::tail_sampling::decision_wait={decision_wait}s"] if decision_wait else []
    collector = stack.collector(config, *overrides)
    try:
        service = f"long-call-{uuid.uuid4().hex[:6]}"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        exporter = OTLPSpanExporter(endpoint=collector.grpc_endpoint, insecure=True)
        # spans leave as they end, as in a call of minutes (the SDK's default: every 5 s)
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
        instrument(LiveKitHandoffInstrumentor, tracer_provider=provider)
        instrument(OpenAIAgentsHandoffInstrumentor, tracer_provider=provider)
        long_call_failing_late(provider, gap)
        assert provider.force_flush(30_000)
        call = as_spans(memory)
        sentinel_run(provider)
        assert provider.force_flush(30_000)
        sentinel = [s for s in as_spans(memory) if s["span_id"] not in {c["span_id"] for c in call}]
        provider.shutdown()
        assert len({s["trace_id"] for s in call}) == 1, "a LiveKit call is one trace"
        failed = [s for s in call if s["status"] == "ERROR"]
        assert failed, "no ERROR span in the call"
        handoff = next(s for s in call if s["span_id"] == failed[0]["parent_id"])
        # its phases of ours (LiveKit's update_agent under it, 1.8.2+, is the framework's: sampled)
        late = {handoff["span_id"]} | {
            s["span_id"]
            for s in call
            if s["parent_id"] == handoff["span_id"] and s["name"].startswith(sc.SPAN_HANDOFF)
        }
        ours = {s["span_id"] for s in call if s["name"].startswith(sc.SPAN_HANDOFF)}
        everything = {s["span_id"] for s in call}

        def settled() -> set[str] | None:
            stored = {s["span_id"] for s in stack.jaeger.spans(service)}
            return stored if {s["span_id"] for s in sentinel} <= stored else None

        stored = wait_until(
            settled, "the sentinel run in Jaeger", timeout=(decision_wait or 30) + 60, every=0.5
        )
        stored &= everything
        print(f"\n{case}: {len(stored)}/{len(everything)} spans of the call kept")
        if case == "shipped-30s":
            assert stored == everything  # the failure came within decision_wait: the whole call
        elif case == "shipped-failure-after-decision_wait":
            assert stored in (everything, set()), "a call is kept whole or not at all"
        else:
            assert ours <= stored and late <= stored  # every handoff, the late failure included
            assert stored in (everything, ours), "the rest of the call: whole or not at all"
    finally:
        netns.stop(collector.process)


# --- the exemplar loop and Jaeger's Monitor tab -----------------------------------------------------
def provisioned_datasources() -> dict[str, dict[str, Any]]:
    import yaml

    folder = CONFIG_DIR / "grafana" / "provisioning" / "datasources"
    return {d["uid"]: d for f in folder.glob("*.yaml") for d in yaml.safe_load(f.read_text())["datasources"]}


def test_exemplars_lead_from_prometheus_to_traces_in_jaeger_and_spm_shows_handoffs(
    stack: Stack, instrument: Any, privacy_scan: Any
) -> None:
    """Handoffs of every framework, spans and metrics over OTLP to otelcol-jaeger.yaml; the shipped
    prometheus.yaml scrapes its exporter in OpenMetrics with exemplar storage on. Each exemplar on
    the handoff duration histogram names a trace that the Jaeger Grafana's exemplar link points at
    holds, at a handoff span; Jaeger's metrics API (the Monitor tab) has our handoff latencies."""
    from urllib.parse import urlsplit

    from framework_runs import FRAMEWORK_RUNS, framework_instrumentors
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    collector = stack.collector(CONFIG_DIR / "otelcol-jaeger.yaml")
    prometheus = Prometheus.start(stack.space)
    try:
        service = f"exemplars-{uuid.uuid4().hex[:6]}"
        resource = Resource.create({"service.name": service})
        provider = TracerProvider(resource=resource)
        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        provider.add_span_processor(privacy_scan)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=collector.grpc_endpoint, insecure=True))
        )
        # the SDK's default interval (60 s): the SDK sends a point's exemplars once, and the collector's
        # Prometheus exporter serves the latest point, so exports must not come faster than scrapes
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=collector.grpc_endpoint, insecure=True), export_interval_millis=60_000
        )
        meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        for instrumentor in framework_instrumentors():
            instrument(instrumentor, tracer_provider=provider, meter_provider=meter_provider)
        started = time.time()
        with tracer_for_livekit(provider):
            for run in FRAMEWORK_RUNS.values():
                run()
        assert provider.force_flush(30_000) and meter_provider.force_flush(30_000)
        handoffs = {s.context.span_id: s for s in memory.get_finished_spans() if s.name == sc.SPAN_HANDOFF}

        # Grafana's exemplar link: the Prometheus data source's destination, at the URL provisioned
        sources = provisioned_datasources()
        (link,) = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
        target = urlsplit(sources[link["datasourceUid"]]["url"])
        (port,) = stack.space.expose(f"{target.hostname}:{target.port}")
        linked = Jaeger(stack.jaeger.process, 0, 0, port, stack.jaeger.log)

        query = f'agent_handoff_duration_seconds_bucket{{service_name="{service}"}}'

        def exemplars() -> list[dict[str, Any]] | None:
            found = [
                e
                for series in prometheus.exemplars(query, started - 60, time.time() + 60)
                for e in series["exemplars"]
            ]
            return found or None

        found = wait_until(exemplars, "exemplars on the handoff histogram in Prometheus", timeout=90, every=1)
        frameworks = set()
        for exemplar in found:
            trace_id, span_id = exemplar["labels"]["trace_id"], exemplar["labels"]["span_id"]
            in_jaeger = wait_until(
                lambda t=trace_id: {s["span_id"]: s for s in linked.spans_v3(t)} or None,
                f"trace {trace_id} in Jaeger",
            )
            assert in_jaeger[span_id]["name"] == sc.SPAN_HANDOFF
            assert int(span_id, 16) in handoffs
            assert float(exemplar["value"]) == pytest.approx(in_jaeger[span_id]["attributes"][sc.DURATION])
            frameworks.add(in_jaeger[span_id]["attributes"][sc.FRAMEWORK])
        assert frameworks, found

        # the Monitor tab: span metrics from the collector's spanmetrics connector, via Prometheus. A
        # latency is a quantile of a rate, so it takes the histogram growing between two scrapes:
        # once Prometheus has the first round, a second round of handoffs
        selector = f'service_name="{service}",span_name="agent_handoff"'
        count = f"traces_span_metrics_duration_milliseconds_count{{{selector}}}"
        wait_until(lambda: prometheus.query(count) or None, "span metrics in Prometheus", timeout=90, every=1)
        with tracer_for_livekit(provider):
            FRAMEWORK_RUNS["openai-agents"]()
        assert provider.force_flush(30_000)

        def latencies() -> dict[str, float] | None:
            answer = stack.jaeger.get(
                "/api/metrics/latencies",
                service=service,
                quantile=0.95,
                spanKind="internal",
                groupByOperation="true",
                lookback=600_000,
                step=5_000,
                ratePer=600_000,
            )
            points = {}
            for metric in answer["metrics"]:
                labels = {label["name"]: label["value"] for label in metric["labels"]}
                values = [
                    float(p["gaugeValue"]["doubleValue"])  # a number, or "NaN" while a rate has one sample
                    for p in metric["metricPoints"]
                    if "doubleValue" in p["gaugeValue"]
                ]
                values = [v for v in values if not math.isnan(v)]
                if values:
                    points[labels.get("operation", "")] = values[-1]
            return points if sc.SPAN_HANDOFF in points else None

        spm = wait_until(latencies, "handoff latencies from Jaeger's metrics API", timeout=120, every=2)
        assert spm[sc.SPAN_HANDOFF] > 0
        p95 = spm[sc.SPAN_HANDOFF]
        print(f"\nexemplars: {len(found)} ({sorted(frameworks)}); SPM p95 agent_handoff {p95:.1f} ms")
        meter_provider.shutdown()
        provider.shutdown()
    finally:
        netns.stop(prometheus.process)
        netns.stop(collector.process)
