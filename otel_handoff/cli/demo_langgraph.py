"""LangGraph handoffs, run offline and traced: ``otel-handoff demo --framework langgraph``.

Real graphs with an in-memory checkpointer; only the chat models are scripted
(:mod:`otel_handoff.cli.offline.langgraph`):

- a langgraph-swarm handoff: triage's model calls ``transfer_to_billing``; billing's model takes
  120 ms and its answer is streamed token by token (``stream_mode="messages"``);
- a langgraph-supervisor delegation: the supervisor sends the question to billing, and billing
  hands back on its edge, where the supervisor's second model call (80 ms) answers.
"""

from __future__ import annotations

import os

from ..langgraph import LangGraphHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import langgraph as lg

__all__ = ["run_langgraph_demo"]

SWARM_THREAD = "demo-swarm-thread"
SUPERVISOR_THREAD = "demo-supervisor-thread"


async def run_langgraph_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the swarm handoff and the supervisor delegation; return their spans."""
    tracing = DemoTracing.create(export_path)
    with tracing.instrumented(LangGraphHandoffInstrumentor(), "LangGraph"):
        await lg.run_async(lg.swarm(), thread=SWARM_THREAD, stream_mode="messages")
        await lg.run_async(lg.supervisor(), thread=SUPERVISOR_THREAD)
    return tracing.result(
        labels={
            SWARM_THREAD: "langgraph-swarm: triage hands off to billing (tokens streamed)",
            SUPERVISOR_THREAD: "langgraph-supervisor: a delegation to billing and its hand-back",
        }
    )
