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

from ..agent_framework import AgentFrameworkHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import agent_framework as af

__all__ = ["run_agent_framework_demo"]

BILLING = [{"text": "Billing here: the second charge is refunded."}]


async def run_agent_framework_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the handoff, then the same with checkpointing; return their spans."""
    tracing = DemoTracing.create(export_path)
    enable_instrumentation(enable_sensitive_data=False)
    with tracing.instrumented(AgentFrameworkHandoffInstrumentor(), "Agent Framework", global_provider=True):
        workflow, agents = af.support(billing=list(BILLING))
        agents["billing"].client.latency = 0.12
        await af.stream(workflow)
        checkpointed, agents = af.support(
            billing=list(BILLING), checkpoint_storage=InMemoryCheckpointStorage()
        )
        agents["billing"].client.latency = 0.12
        await af.stream(checkpointed)
    return tracing.result()
