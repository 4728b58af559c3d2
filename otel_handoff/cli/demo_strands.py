"""Strands Agents swarm handoffs, run offline and traced: ``otel-handoff demo --framework strands``.

Real agents, event loops, tools and ``Swarm``; only the model is scripted
(:mod:`otel_handoff.cli.offline.strands`):

- Strands' default: triage's model (50 ms) calls ``handoff_to_agent``; triage's turn goes on with
  one more model call (its closing reply, 50 ms: the drain) before the swarm switches to billing,
  whose model takes 120 ms;
- the same handoff where the app's ``AfterToolsEvent`` hook ends triage's turn at the tool: no drain.
"""

from __future__ import annotations

import os

from opentelemetry import trace

from ..strands import StrandsHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import strands as st

__all__ = ["run_strands_demo"]

DRAIN_SESSION = "demo-swarm-drain"
END_TURN_SESSION = "demo-swarm-end-turn"


async def run_strands_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the handoff with the drain and the one whose turn the app's hook ends; return their spans."""
    tracing = DemoTracing.create(export_path)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # Strands traces on the global provider: the demo's, so each handoff shows inside its trace
        trace.set_tracer_provider(tracing.provider)
    instrumentor = StrandsHandoffInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        raise RuntimeError("run_strands_demo instruments Strands itself: uninstrument it first")
    instrumentor.instrument(tracer_provider=tracing.provider, meter_provider=tracing.meter_provider)
    labels = {DRAIN_SESSION: "Strands' default: triage's closing reply (50 ms) drains before the switch"}
    try:
        await st.stream(st.swarm(session_id=DRAIN_SESSION))
        if st.AfterToolsEvent is not None:
            await st.stream(st.swarm(session_id=END_TURN_SESSION, end_turn=True))
            labels[END_TURN_SESSION] = (
                "the app's AfterToolsEvent hook ends triage's turn at the tool: no drain"
            )
    finally:
        instrumentor.uninstrument()
    return tracing.result(labels=labels)
