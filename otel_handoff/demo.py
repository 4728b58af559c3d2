"""A real multi-agent LiveKit ``AgentSession``, run offline and traced: ``otel-handoff demo``.

Nothing is mocked between the agents: the framework runs its own handoff path (tool
transfers, an AgentTask entering and handing back, ``update_agent()`` calls, STT and
realtime-session reuse). Only the model edges are offline fakes (:mod:`otel_handoff._offline`),
so it needs no room, no server and no keys.

Spans go to memory (for the waterfall), to an OTLP endpoint when ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and to an OTLP JSON Lines file on request.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from livekit.agents import Agent, AgentSession, AgentTask, function_tool, telemetry
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ._configure import metric_exporters, span_exporters
from ._offline import IdleRealtimeModel, ScriptedLLM, SilentSTT
from .livekit import LiveKitHandoffInstrumentor

__all__ = ["DEFAULT_SERVICE_NAME", "DemoResult", "DemoSetupError", "run_demo", "write_otlp_json"]

DEFAULT_SERVICE_NAME = "otel-handoff-demo"
# a framework step that never comes means a broken demo: fail loudly instead of hanging
_STEP_TIMEOUT = 15.0
# simulated connection time of a fresh realtime session, so reuse visibly saves it
_REALTIME_CONNECT_DELAY = 0.03

T = TypeVar("T")


class DemoSetupError(Exception):
    """The demo cannot start as configured (an OTLP setting, the export file)."""


# --- agents ----------------------------------------------------------------------------------
class _DemoAgent(Agent):
    """An agent whose ``on_enter`` signals, so the demo awaits it instead of sleeping."""

    def __init__(self, *, instructions: str, **kwargs: Any) -> None:
        super().__init__(instructions=instructions, **kwargs)
        self.entered = asyncio.Event()

    async def on_enter(self) -> None:
        self.entered.set()


class Billing(_DemoAgent):
    """Receives the transfer and greets the caller (one scripted LLM turn)."""

    def __init__(self) -> None:
        super().__init__(instructions="You handle billing questions.")
        self.greeting: Awaitable[Any] | None = None

    async def on_enter(self) -> None:
        self.greeting = self.session.generate_reply(instructions="Greet the caller.")
        self.entered.set()


class CollectEmail(AgentTask[str]):
    """A task that takes over the conversation briefly and hands a result back."""

    def __init__(self) -> None:
        super().__init__(instructions="Collect the caller's email address.")

    async def on_enter(self) -> None:
        self.complete("caller@example.com")


class Triage(_DemoAgent):
    """The first agent: collects an email with a task, then transfers to billing."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the front desk.")
        self.billing = Billing()

    @function_tool
    async def ask_email(self) -> str:
        """Collect the caller's email address with a task, then come back."""
        return await CollectEmail()

    @function_tool
    async def transfer(self) -> Agent:
        """Transfer the caller to billing."""
        return self.billing


class Concierge(_DemoAgent):
    """A realtime agent on the session's shared model."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the concierge.")


class Specialist(_DemoAgent):
    """A realtime agent on the same model as the concierge: its session is reused."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the specialist.")


class Supervisor(_DemoAgent):
    """A realtime agent with a model of its own: it must open a new session."""

    def __init__(self) -> None:
        super().__init__(
            instructions="You are the supervisor.",
            llm=IdleRealtimeModel(mutable=True, connect_delay=_REALTIME_CONNECT_DELAY),
        )


# --- the conversations ----------------------------------------------------------------------
def _session_options() -> dict[str, Any]:
    """Options that keep an offline session quick on the releases that have them."""
    params = inspect.signature(AgentSession.__init__).parameters
    # no caller will speak again: do not wait for a last transcript when closing
    return {"session_close_transcript_timeout": 0.0} if "session_close_transcript_timeout" in params else {}


async def _step(awaitable: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, _STEP_TIMEOUT)
    except asyncio.TimeoutError:
        raise RuntimeError(f"demo: {what} did not happen within {_STEP_TIMEOUT:.0f} s") from None


async def _pipeline_conversation(stt: SilentSTT) -> None:
    """Triage → CollectEmail (task) → Triage → Billing (tool transfer), sharing one STT."""
    session = AgentSession(
        llm=ScriptedLLM(tool_calls=["ask_email", "transfer"]), stt=stt, **_session_options()
    )
    triage = Triage()
    await session.start(agent=triage)
    try:
        # the scripted model calls ask_email, then transfer in its reply to the task's result
        await _step(session.run(user_input="Hi, I have a question about my invoice."), "the first turn")
        await _step(triage.billing.entered.wait(), "the transfer to billing")
        if triage.billing.greeting is not None:
            await _step(triage.billing.greeting, "billing's greeting")
    finally:
        await session.aclose()


async def _realtime_conversation(model: IdleRealtimeModel) -> None:
    """Concierge → Specialist (session reused) → Supervisor and back, queued back to back."""
    session = AgentSession(llm=model, **_session_options())
    await session.start(agent=Concierge())
    try:
        specialist = Specialist()
        session.update_agent(specialist)
        await _step(session._update_activity_atask, "the handoff to the specialist")
        await _step(specialist.entered.wait(), "the specialist's on_enter")

        # two handoffs requested at once: the second waits in the queue for the first
        session.update_agent(Supervisor())
        concierge = Concierge()
        session.update_agent(concierge)
        await _step(session._update_activity_atask, "the queued handoffs")
        await _step(concierge.entered.wait(), "the concierge's on_enter")
    finally:
        await session.aclose()


# --- tracing -----------------------------------------------------------------------------------
class _CountingExporter(SpanExporter):
    """Delegates to an exporter and counts what it accepted, for an honest summary line."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


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


def _hex_ids(request: dict[str, Any]) -> dict[str, Any]:
    """Ids as hex, as OTLP/JSON requires (the plain protobuf JSON mapping gives base64)."""

    def fix(obj: dict[str, Any]) -> None:
        for key in ("traceId", "spanId", "parentSpanId"):
            if obj.get(key):
                obj[key] = base64.b64decode(obj[key]).hex()

    for resource_spans in request.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                fix(span)
                for link in span.get("links", []):
                    fix(link)
    return request


def write_otlp_json(spans: Sequence[ReadableSpan], path: str | os.PathLike[str]) -> None:
    """Write ``spans`` as OTLP JSON Lines: one ``ExportTraceServiceRequest`` per trace and line.

    The layout of the collector's file exporter, so the file can be replayed into a
    collector (``otlpjsonfile`` receiver) or read by anything that speaks OTLP/JSON.
    """
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        by_trace.setdefault(span.context.trace_id, []).append(span)
    with Path(path).open("w", encoding="utf-8") as out:
        for trace_spans in by_trace.values():
            request = MessageToDict(encode_spans(trace_spans), use_integers_for_enums=True)
            out.write(json.dumps(_hex_ids(request), separators=(",", ":")) + "\n")


@dataclass
class DemoResult:
    """What a demo run produced. Call :meth:`shutdown` once done, to flush OTLP export."""

    spans: tuple[ReadableSpan, ...]
    provider: TracerProvider
    meter_provider: MeterProvider | None
    stt_streams: int
    realtime_sessions: int
    export_path: str | None = None
    otlp_target: str | None = None
    _otlp: _CountingExporter | None = field(default=None, repr=False)

    def shutdown(self) -> str | None:
        """Flush and shut the provider down; return one line saying where spans went, if anywhere."""
        self.provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
        where: list[str] = []
        if self._otlp is not None and self.otlp_target is not None:
            if self._otlp.failed:
                where.append(
                    f"{self.otlp_target} ({self._otlp.exported} spans, {self._otlp.failed} failed:"
                    " see the log above)"
                )
            else:
                where.append(f"{self.otlp_target} ({self._otlp.exported} spans)")
        if self.export_path is not None:
            where.append(f"{self.export_path} ({len(self.spans)} spans, OTLP JSON Lines)")
        return "spans exported to " + "; ".join(where) if where else None


async def run_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the offline conversations traced, and return their finished spans.

    Instruments livekit-agents for the duration of the run (it must not be instrumented
    already) and points LiveKit's own tracer at the same provider, so its spans share the
    traces. With an OTLP endpoint set, spans and metrics are exported the way
    :func:`otel_handoff.configure` exports them (the same ``OTEL_*`` variables, checked the same
    way, one warning per unreachable receiver); ``export_path`` also writes the spans as OTLP
    JSON Lines.
    """
    if export_path is not None:
        try:  # fail before the run, not after it
            Path(export_path).open("w", encoding="utf-8").close()
        except OSError as exc:
            raise DemoSetupError(f"cannot write {os.fspath(export_path)}: {exc.strerror or exc}") from exc
    provider = TracerProvider(resource=_resource())
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    otlp: _CountingExporter | None = None
    otlp_target: str | None = None
    meter_provider: MeterProvider | None = None
    if _otlp_requested():
        for description, exporter in span_exporters():
            otlp, otlp_target = _CountingExporter(exporter), description
            provider.add_span_processor(BatchSpanProcessor(otlp))
        readers = [PeriodicExportingMetricReader(exporter) for _, exporter in metric_exporters()]
        if readers:  # the handoff metrics too, for the Grafana dashboard
            meter_provider = MeterProvider(resource=provider.resource, metric_readers=readers)

    # LiveKit's own spans in the same traces; keep conversation content out of them (1.8+)
    if "allow_pii" in inspect.signature(telemetry.set_tracer_provider).parameters:
        telemetry.set_tracer_provider(provider, allow_pii=False)
    else:
        telemetry.set_tracer_provider(provider)

    instrumentor = LiveKitHandoffInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        raise RuntimeError("run_demo instruments livekit-agents itself: uninstrument it first")
    instrumentor.instrument(tracer_provider=provider, meter_provider=meter_provider)
    stt = SilentSTT()
    realtime = IdleRealtimeModel(mutable=True, connect_delay=_REALTIME_CONNECT_DELAY)
    try:
        # each conversation in a task of its own: LiveKit attaches its session's root span as
        # the current context and never detaches it, which would nest the next session in it
        await asyncio.create_task(_pipeline_conversation(stt))
        await asyncio.create_task(_realtime_conversation(realtime))
    finally:
        instrumentor.uninstrument()

    spans = tuple(memory.get_finished_spans())
    path = None
    if export_path is not None:
        write_otlp_json(spans, export_path)
        path = os.fspath(export_path)
    return DemoResult(
        spans=spans,
        provider=provider,
        meter_provider=meter_provider,
        stt_streams=stt.streams,
        realtime_sessions=len(realtime.sessions),
        export_path=path,
        otlp_target=otlp_target,
        _otlp=otlp,
    )
