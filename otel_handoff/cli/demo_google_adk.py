"""Google ADK transfers, run offline and traced: ``otel-handoff demo --framework google-adk``.

The real ADK ``Runner``, agents and flows; only the model edges are scripted
(:mod:`otel_handoff.cli.offline.google_adk`):

- a text run: triage's model calls ``transfer_to_agent``; the app's own loop spends 20 ms on each
  event (ADK waits for it), billing's instruction provider takes 20 ms and its model 120 ms;
- a live (voice) session: the same transfer, where ADK sleeps its fixed transfer delay, closes the
  old connection, opens billing's (150 ms assumed) and replays the history; billing's first audio
  comes 350 ms later (assumed);
- a remote transfer, when a2a-sdk is installed (``google-adk[a2a]``): billing served by another
  process over A2A (:mod:`otel_handoff.cli.offline.google_adk_remote`: ``to_a2a()`` under uvicorn
  on 127.0.0.1, its model 150 ms), two turns, the server cold then warm; that process traces
  itself (``OTEL_HANDOFF_AUTO_INSTRUMENT``) into a file of its own, whose ``remote_setup`` spans
  the waterfall shows (that process's to export: ``--export`` and OTLP carry the demo's).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import schema as sc
from ..google_adk import GoogleADKHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import google_adk as ga

__all__ = ["run_google_adk_demo"]

TEXT_SESSION = "demo-text-session"
LIVE_SESSION = "demo-live-session"
REMOTE_SESSION = "demo-remote-session"


async def run_google_adk_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the text and the live transfer; return their spans."""
    tracing = DemoTracing.create(export_path)
    with tracing.instrumented(GoogleADKHandoffInstrumentor(), "Google ADK", global_provider=True):
        text = await ga.run_text(
            ga.text_agents(instructions_delay=0.02, billing_latency=0.12),
            consumer_delay=0.02,
            session_id=TEXT_SESSION,
        )
        live = await ga.run_live(
            ga.live_agents(connect_delay=0.15, first_audio_delay=0.35), session_id=LIVE_SESSION
        )
        results = [text, live]
        with _billing_served_elsewhere() as (card_url, served):
            if card_url is not None:
                from .offline import google_adk_remote as gr

                results += await gr.converse(card_url, turns=2, session_id=REMOTE_SESSION)
    for result in results:
        if result.error is not None:
            raise result.error
    return tracing.result(
        served,
        labels={
            TEXT_SESSION: "text run: the app's loop takes 20 ms per event",
            LIVE_SESSION: "live session: scripted connection (connect 150 ms, first audio 350 ms)",
            REMOTE_SESSION: "remote transfer over A2A to another process (cold, then warm)",
        },
    )


@contextlib.contextmanager
def _billing_served_elsewhere() -> Iterator[tuple[str | None, list[Any]]]:
    """A billing server process traced into a file of its own (nothing when a2a-sdk is not
    installed); once it has ended, ``served`` holds its spans of ours, read back from that file."""
    served: list[Any] = []
    if importlib.util.find_spec("a2a") is None:
        yield None, served
        return
    from .offline import google_adk_remote as gr

    with tempfile.TemporaryDirectory() as folder:
        spans_file = Path(folder) / "billing.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {
            "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
            "OTEL_TRACES_EXPORTER": "otel_handoff_file",
            "OTEL_HANDOFF_EXPORT_FILE": str(spans_file),
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "billing",
        }
        with gr.remote_billing(env=env) as card_url:
            yield card_url, served
        served.extend(_ours(spans_file))


def _ours(path: Path) -> list[Any]:
    """Our spans in another process's file, as the SDK's finished spans (for the waterfall)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    from .span_sources import read_spans

    if not path.exists():
        return []
    found = []
    for record in read_spans(str(path)):
        if not record.name.startswith(sc.SPAN_HANDOFF) or record.start_ns is None or record.end_ns is None:
            continue
        trace_id, sampled = int(record.trace_id, 16), TraceFlags(TraceFlags.SAMPLED)
        parent = record.parent_id and SpanContext(trace_id, int(record.parent_id, 16), True, sampled)
        found.append(
            ReadableSpan(
                name=record.name,
                context=SpanContext(trace_id, int(record.span_id, 16), False, sampled),
                parent=parent or None,
                resource=Resource.create({"service.name": "billing"}),
                attributes=dict(record.attributes),
                start_time=record.start_ns,
                end_time=record.end_ns,
            )
        )
    return found
