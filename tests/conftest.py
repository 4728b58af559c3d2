"""Shared fixtures: one SDK provider with an in-memory exporter, LiveKit's own telemetry on it."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_handoff.core import schema as sc

# delta temporality: each read returns only what was recorded since the previous one
METRIC_READER = InMemoryMetricReader(
    preferred_temporality={Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
)
METER_PROVIDER = MeterProvider(metric_readers=[METRIC_READER])
T = TypeVar("T")
EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider()
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))


class Spans:
    """Finished spans of one test, with the queries the tests need."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return sorted((s for s in self.all() if s.name == name), key=lambda s: s.start_time)

    def handoffs(self) -> list[ReadableSpan]:
        return sorted(self.named(sc.SPAN_HANDOFF), key=lambda s: s.attributes[sc.SEQUENCE])

    def children(self, parent: ReadableSpan, name: str | None = None) -> list[ReadableSpan]:
        found = [
            s
            for s in self.all()
            if s.parent is not None
            and s.parent.span_id == parent.context.span_id
            and (name is None or s.name == name)
        ]
        return sorted(found, key=lambda s: s.start_time)

    def by_id(self, span_id: int) -> ReadableSpan | None:
        return next((s for s in self.all() if s.context.span_id == span_id), None)


@pytest.fixture(scope="session")
def provider() -> TracerProvider:
    return PROVIDER


@pytest.fixture(scope="session", autouse=True)
def livekit_telemetry(provider: TracerProvider) -> None:
    """LiveKit's own spans go to the same provider, as `otel_handoff.configure()` arranges."""
    try:
        from livekit.agents.telemetry import set_tracer_provider
    except ImportError:
        return
    set_tracer_provider(provider)


@pytest.fixture
def spans() -> Iterator[Spans]:
    EXPORTER.clear()
    yield Spans(EXPORTER)
    EXPORTER.clear()


async def plain_and_traced(provider: TracerProvider, observe: Callable[[], Awaitable[T]]) -> tuple[T, T]:
    """Run the same scenario without, then with the LiveKit instrumentation, for comparison."""
    from otel_handoff.livekit import LiveKitHandoffInstrumentor

    plain = await observe()
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await observe()
    finally:
        instrumentor.uninstrument()
    return plain, traced


# attributes every LiveKit `agent_handoff` span carries (the README's span table)
HANDOFF_ALWAYS = (
    sc.GEN_AI_OPERATION_NAME,
    sc.FROM_AGENT_NAME,
    sc.TO_AGENT_NAME,
    sc.FROM_AGENT_ID,
    sc.TO_AGENT_ID,
    sc.FRAMEWORK,
    sc.FRAMEWORK_VERSION,
    sc.PREVIOUS_ACTIVITY,
    sc.NEW_ACTIVITY,
    sc.TRIGGER,
    sc.STT_REUSED,
    sc.REALTIME_SESSION_REUSED,
    sc.TURN_DETECTOR_REUSED,
    sc.QUEUE_WAIT_DURATION,
    sc.LOCK_WAIT_DURATION,
    sc.DURATION,
    sc.OUTCOME,
    sc.SEQUENCE,
)


@pytest.fixture
def instrumented(provider: TracerProvider, spans: Spans) -> Iterator[Spans]:
    from otel_handoff.livekit import LiveKitHandoffInstrumentor

    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider, meter_provider=METER_PROVIDER)
    METRIC_READER.get_metrics_data()  # collect (and so reset) what earlier tests recorded
    yield spans
    instrumentor.uninstrument()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """Reads what the `instrumented` fixture's meter provider recorded (delta since last read)."""
    return METRIC_READER


class OpenSpans(SpanProcessor):
    """Tracks spans started and not yet ended, to prove every span we start is ended."""

    def __init__(self) -> None:
        self.open: dict[int, ReadableSpan] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.open[span.context.span_id] = span

    def on_end(self, span: ReadableSpan) -> None:
        self.open.pop(span.context.span_id, None)

    def ours(self) -> list[ReadableSpan]:
        return [s for s in self.open.values() if s.name.startswith(sc.SPAN_HANDOFF)]


OPEN_SPANS = OpenSpans()
PROVIDER.add_span_processor(OPEN_SPANS)

# every instruction, user utterance, tool argument and tool result the tests feed the frameworks
PRIVATE_TEXTS = (
    "You route the caller",
    "You help the caller",
    "You are A.",
    "You are B.",
    "Collect an email address",
    "Hand over at once",
    "I have a billing question",
    "billing please",
    "take my email",
    "transfer me",
    "someone@example.com",
    "checking your account",
    "order_id",
    "You handle billing questions",
    "Greet the caller",
    "I want a refund for order 4711",
    "Route the customer",
    "Handle refunds",
    "Refunded order",
    "my card is 4111",
    # ag2 1.x workflow channels: the seed, model replies, Handoff.reason, Finish.summary and reason
    "charged twice",
    "disputes invoice",
    "refunded order 4711",
    "customer satisfied",
    "moving you to billing",
    "supervisor here",
    "vip desk here",
    # Pipecat Flows: node role and task messages
    "You are the ",
    "Help at the ",
)


class PrivacyScan(SpanProcessor):
    """Scans every attribute and event of every span we emit, in every test, for private text."""

    def __init__(self) -> None:
        self.scanned = 0
        self.leaks: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope.name if span.instrumentation_scope else ""
        if not scope.startswith("otel_handoff"):
            return
        self.scanned += 1
        values = [*(span.attributes or {}).items()]
        for event in span.events:
            values += [(f"{event.name}.{k}", v) for k, v in (event.attributes or {}).items()]
        for key, value in values:
            text = str(value)
            self.leaks += [f"{span.name} {key}: {p!r}" for p in PRIVATE_TEXTS if p in text]


PRIVACY_SCAN = PrivacyScan()
PROVIDER.add_span_processor(PRIVACY_SCAN)


@pytest.fixture(autouse=True)
def no_private_text_in_spans() -> Iterator[None]:
    """Private by default: checked after every test of the suite."""
    before = len(PRIVACY_SCAN.leaks)
    yield
    assert PRIVACY_SCAN.leaks[before:] == [], "private text in spans"


@pytest.fixture
def open_spans() -> OpenSpans:
    return OPEN_SPANS


@pytest.fixture(autouse=True)
def collect_garbage_between_tests() -> Iterator[None]:
    """Finalize what a test left behind at a known point, not inside some later call.

    livekit-agents 1.2 leaves async generators of a closed session to the garbage collector;
    finalized at a random moment (in CPython 3.11, during a later compile()) they corrupt the
    interpreter's recursion count. Collecting here keeps their finalizers between tests.
    """
    yield
    gc.collect()
