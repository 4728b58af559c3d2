"""The collector pipelines we ship, run unchanged on real engines: every ``otelcol-*.yaml``, tail
sampling at scale, a late failure in a long call, and the exemplar loop from Prometheus to Jaeger.

One network namespace holds what docker-compose would run: Jaeger v2.13 on ``jaeger``, a second
Jaeger on ``tempo`` standing in for Grafana Tempo (not in our test tools for its licence; it only
receives what the collector sends there), ``otelcol-handoff`` (our ocb build) on
``otel-collector`` and Debian's Prometheus on ``prometheus``, each on the ports the files name.
"""

from __future__ import annotations

import asyncio
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
from stack import CONFIG_DIR, NO_INTERNAL_TELEMETRY, Collector, Jaeger, namespace
from test_jaeger import as_spans, check_same_spans

from otel_handoff.core import schema as sc

TAIL_SAMPLING = CONFIG_DIR / "otelcol-tail-sampling.yaml"


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
        rss_before = collector.rss_bytes()
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
            f"({held / 480 / 1e3:.1f} kB each, {len(sent.expected) / 480:.1f} spans each)"
        )
    finally:
        netns.stop(collector.process)
