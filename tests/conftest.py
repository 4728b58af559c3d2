"""Shared fixtures: one SDK provider with an in-memory exporter, LiveKit's own telemetry on it.

Tests take what they need as fixtures: ``provider``, ``meter_provider``, ``metric_reader``,
``spans``, ``open_spans``, ``privacy_scan``, ``convention_scan``, ``instrument`` (any of our
instrumentors on those providers, undone after the test), ``instrumented`` (LiveKit),
``plain_and_traced`` and ``rotel`` (a real collector). The span checks they share are in
``support.py``.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from receivers import Rotel
from support import ConventionScan, OpenSpans, PrivacyScan, Spans

from otel_handoff.core import schema as sc
from otel_handoff.core.metrics import HandoffMetrics
from otel_handoff.core.spans import HandoffTelemetry

T = TypeVar("T")
# delta temporality: each read returns only what was recorded since the previous one
METRIC_READER = InMemoryMetricReader(
    preferred_temporality={Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
)
METER_PROVIDER = MeterProvider(metric_readers=[METRIC_READER])
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
OPEN_SPANS = OpenSpans()
PROVIDER.add_span_processor(OPEN_SPANS)
PRIVACY_SCAN = PrivacyScan()
PROVIDER.add_span_processor(PRIVACY_SCAN)
CONVENTION_SCAN = ConventionScan()
PROVIDER.add_span_processor(CONVENTION_SCAN)


@pytest.fixture(scope="session")
def provider() -> TracerProvider:
    return PROVIDER


@pytest.fixture(scope="session")
def meter_provider() -> MeterProvider:
    return METER_PROVIDER


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """Reads what ``meter_provider`` recorded (delta since the last read)."""
    return METRIC_READER


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return EXPORTER


@pytest.fixture(scope="session", autouse=True)
def livekit_telemetry(provider: TracerProvider) -> None:
    """LiveKit's own spans go to the same provider, as `otel_handoff.configure()` arranges."""
    try:
        from livekit.agents.telemetry import set_tracer_provider
    except ImportError:
        return
    set_tracer_provider(provider)


@pytest.fixture
def telemetry(provider: TracerProvider) -> HandoffTelemetry:
    """What a framework package hands the core, on the test provider (Pipecat's name: any would do)."""
    return HandoffTelemetry(
        tracer=provider.get_tracer("otel_handoff.test"),
        metrics=HandoffMetrics(None, "otel_handoff.test"),
        static_attributes={sc.FRAMEWORK: sc.FRAMEWORK_PIPECAT, sc.FRAMEWORK_VERSION: "0"},
    )


@pytest.fixture
def spans() -> Iterator[Spans]:
    EXPORTER.clear()
    yield Spans(EXPORTER)
    EXPORTER.clear()


@pytest.fixture
def instrument() -> Iterator[Callable[..., Any]]:
    """``instrument(SomeInstrumentor)``: instrumented on the test providers, metrics read from now on;
    uninstrumented after the test."""
    done: list[Any] = []

    def instrument(instrumentor_class: type, **kwargs: Any) -> Any:
        instrumentor = instrumentor_class()
        instrumentor.instrument(**{"tracer_provider": PROVIDER, "meter_provider": METER_PROVIDER, **kwargs})
        METRIC_READER.get_metrics_data()  # collect (and so reset) what earlier tests recorded
        done.append(instrumentor)
        return instrumentor

    yield instrument
    for instrumentor in reversed(done):
        instrumentor.uninstrument()


@pytest.fixture
def instrumented(instrument: Callable[..., Any], spans: Spans) -> Spans:
    from otel_handoff.livekit import LiveKitHandoffInstrumentor

    instrument(LiveKitHandoffInstrumentor)
    return spans


@pytest.fixture
def plain_and_traced(
    provider: TracerProvider,
) -> Callable[[Callable[[], Awaitable[T]]], Awaitable[tuple[T, T]]]:
    """Run the same scenario without, then with the LiveKit instrumentation, for comparison."""

    async def compare(observe: Callable[[], Awaitable[T]]) -> tuple[T, T]:
        from otel_handoff.livekit import LiveKitHandoffInstrumentor

        plain = await observe()
        instrumentor = LiveKitHandoffInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        try:
            traced = await observe()
        finally:
            instrumentor.uninstrument()
        return plain, traced

    return compare


@pytest.fixture
def rotel(tmp_path: Path) -> Iterator[Rotel]:
    """A real OpenTelemetry collector on loopback, its received spans readable."""
    collector = Rotel.start(tmp_path / "rotel")
    try:
        yield collector
    finally:
        collector.stop()


@pytest.fixture(autouse=True)
def no_private_text_in_spans() -> Iterator[None]:
    """Private by default: checked after every test of the suite."""
    before = len(PRIVACY_SCAN.leaks)
    yield
    assert PRIVACY_SCAN.leaks[before:] == [], "private text in spans"


@pytest.fixture(autouse=True)
def one_error_convention_and_no_made_up_gen_ai() -> Iterator[None]:
    """Checked after every test of the suite, on every framework's spans."""
    before = len(CONVENTION_SCAN.violations)
    yield
    assert CONVENTION_SCAN.violations[before:] == []


@pytest.fixture
def privacy_scan() -> PrivacyScan:
    return PRIVACY_SCAN


@pytest.fixture
def convention_scan() -> ConventionScan:
    return CONVENTION_SCAN


@pytest.fixture
def open_spans() -> OpenSpans:
    return OPEN_SPANS


@pytest.fixture(scope="session", autouse=True)
def freeze_what_collection_imported() -> None:
    """Every framework is imported by now: collect once, then leave those objects out of later
    collections (``gc.freeze``), so collecting after each test walks only what tests made."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def collect_garbage_between_tests(freeze_what_collection_imported: None) -> Iterator[None]:
    """Finalize what a test left behind at a known point, not inside some later call.

    livekit-agents 1.2 leaves async generators of a closed session to the garbage collector;
    finalized at a random moment (in CPython 3.11, during a later compile()) they corrupt the
    interpreter's recursion count. Collecting here keeps their finalizers between tests.
    """
    yield
    gc.collect()
