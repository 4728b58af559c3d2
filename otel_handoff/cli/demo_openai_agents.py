"""OpenAI Agents SDK handoffs, run offline and traced: ``otel-handoff demo --framework openai-agents``.

The real SDK throughout; only the models are scripted (:mod:`otel_handoff.cli.offline.openai_agents`):

- a streamed text run, triage -> billing -> refunds, where billing's ``on_handoff`` looks the
  customer up, an input filter trims the history and billing's instructions are built per call;
- a realtime (voice) session through the SDK's real websocket client against a Realtime server on
  127.0.0.1, where the old agent's response runs on for 300 ms after it asked for the handoff.

No keys, no network: the SDK's own trace export to OpenAI is turned off for the demo.
"""

from __future__ import annotations

import os

from ..openai_agents import OpenAIAgentsHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import openai_agents as oa

__all__ = ["run_openai_agents_demo"]

TEXT_RUN = "demo-text-run"  # the text run's group id (its gen_ai.conversation.id)


async def run_openai_agents_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the text chain and the realtime handoff; return their spans."""
    tracing = DemoTracing.create(export_path)
    oa.quiet_sdk_tracing()
    with tracing.instrumented(OpenAIAgentsHandoffInstrumentor(), "the OpenAI Agents SDK"):
        text = oa.TextScenario(
            on_handoff_delay=0.03,
            input_filter_delay=0.01,
            instructions_delay=0.02,
            reply_delay=0.12,
            chain=True,
            group_id=TEXT_RUN,
        )
        await oa.run_text(text, "streamed")
        async with oa.LoopbackRealtimeServer(
            old_response_tail=0.3, ack_delay=0.05, audio_delay=0.1
        ) as server:
            await oa.run_websocket_realtime(server, oa.realtime_agents(instructions_delay=0.01))
    return tracing.result(
        labels={
            TEXT_RUN: "text run (streamed): triage -> billing -> refunds",
            oa.LOOPBACK_SESSION_ID: "realtime session: the SDK's websocket client, a server on 127.0.0.1",
        }
    )
