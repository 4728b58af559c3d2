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

from ..strands import StrandsHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import strands as st

__all__ = ["run_strands_demo"]

DRAIN_SESSION = "demo-swarm-drain"
END_TURN_SESSION = "demo-swarm-end-turn"


async def run_strands_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the handoff with the drain and the one whose turn the app's hook ends; return their spans."""
    tracing = DemoTracing.create(export_path)
    labels = {DRAIN_SESSION: "Strands' default: triage's closing reply (50 ms) drains before the switch"}
    with tracing.instrumented(StrandsHandoffInstrumentor(), "Strands Agents", global_provider=True):
        await st.stream(st.swarm(session_id=DRAIN_SESSION))
        if st.AfterToolsEvent is not None:
            await st.stream(st.swarm(session_id=END_TURN_SESSION, end_turn=True))
            labels[END_TURN_SESSION] = (
                "the app's AfterToolsEvent hook ends triage's turn at the tool: no drain"
            )
    return tracing.result(labels=labels)
