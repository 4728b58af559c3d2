"""Google ADK transfers, run offline and traced: ``otel-handoff demo --framework google-adk``.

The real ADK ``Runner``, agents and flows; only the model edges are scripted
(:mod:`otel_handoff.cli.offline.google_adk`):

- a text run: triage's model calls ``transfer_to_agent``; the app's own loop spends 20 ms on each
  event (ADK waits for it), billing's instruction provider takes 20 ms and its model 120 ms;
- a live (voice) session: the same transfer, where ADK sleeps its fixed transfer delay, closes the
  old connection, opens billing's (150 ms assumed) and replays the history; billing's first audio
  comes 350 ms later (assumed).
"""

from __future__ import annotations

import os

from ..google_adk import GoogleADKHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import google_adk as ga

__all__ = ["run_google_adk_demo"]

TEXT_SESSION = "demo-text-session"
LIVE_SESSION = "demo-live-session"


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
    for result in (text, live):
        if result.error is not None:
            raise result.error
    return tracing.result(
        labels={
            TEXT_SESSION: "text run: the app's loop takes 20 ms per event",
            LIVE_SESSION: "live session: scripted connection (connect 150 ms, first audio 350 ms)",
        }
    )
