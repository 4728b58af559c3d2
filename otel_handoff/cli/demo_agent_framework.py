"""Microsoft Agent Framework handoffs, run offline and traced: ``otel-handoff demo --framework
agent-framework``.

A real ``HandoffBuilder`` workflow of two agents; only the chat client is scripted
(:mod:`otel_handoff.cli.offline.agent_framework`):

- triage's model (50 ms) calls ``handoff_to_billing``; the workflow sends the conversation to
  billing in its next superstep, and billing's model takes 120 ms, streamed;
- the same handoff with checkpointing on: the superstep boundary writes a checkpoint (the
  ``dispatch`` phase holds it, ``agent_handoff.checkpoint_writes`` says so).
"""

from __future__ import annotations

import os

from agent_framework import InMemoryCheckpointStorage
from agent_framework.observability import enable_instrumentation
from opentelemetry import trace

from ..agent_framework import AgentFrameworkHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import agent_framework as af

__all__ = ["run_agent_framework_demo"]

BILLING = [{"text": "Billing here: the second charge is refunded."}]


async def run_agent_framework_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the handoff, then the same with checkpointing; return their spans."""
    tracing = DemoTracing.create(export_path)
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        # the framework traces on the global provider: the demo's, so each handoff shows in its trace
        trace.set_tracer_provider(tracing.provider)
    enable_instrumentation(enable_sensitive_data=False)
    instrumentor = AgentFrameworkHandoffInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        raise RuntimeError(
            "run_agent_framework_demo instruments Agent Framework itself: uninstrument it first"
        )
    instrumentor.instrument(tracer_provider=tracing.provider, meter_provider=tracing.meter_provider)
    try:
        workflow, agents = af.support(billing=list(BILLING))
        agents["billing"].client.latency = 0.12
        await af.stream(workflow)
        checkpointed, agents = af.support(
            billing=list(BILLING), checkpoint_storage=InMemoryCheckpointStorage()
        )
        agents["billing"].client.latency = 0.12
        await af.stream(checkpointed)
    finally:
        instrumentor.uninstrument()
    return tracing.result()
