"""LlamaIndex handoffs, run offline and traced: ``otel-handoff demo --framework llama-index``.

A real ``AgentWorkflow`` with two ``FunctionAgent``s; only the LLM is scripted
(:mod:`otel_handoff.cli.offline.llama_index`):

- triage's model calls ``handoff(to_agent="billing")``; billing's model takes 120 ms and its
  answer is streamed word by word (``stream_events()``);
- triage's model asks for an agent the workflow does not have: LlamaIndex's tool refuses it and
  triage is asked again, one more model call (80 ms) the span shows as ``rejected``.
"""

from __future__ import annotations

import os

from ..llama_index import LlamaIndexHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import llama_index as li

__all__ = ["run_llama_index_demo"]


async def run_llama_index_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the handoff and the refused one; return their spans."""
    tracing = DemoTracing.create(export_path)
    with tracing.instrumented(LlamaIndexHandoffInstrumentor(), "LlamaIndex"):
        taken = li.make_workflow(
            [li.handoff_call("billing", "call-billing")],
            [{"text": "Billing here: your invoice was paid twice."}],
        )
        taken.agents["billing"].llm.latency = 0.12
        await li.run(taken, "Why was I charged twice?")
        refused = li.make_workflow(
            [li.handoff_call("refunds", "call-refunds"), {"text": "I can answer that myself."}],
            [],
            latency=0.08,
        )
        await li.run(refused, "Refund my second charge.")
    return tracing.result()
