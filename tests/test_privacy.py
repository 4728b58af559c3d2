"""The privacy scan itself can fail: it catches private text, and it really scans our spans."""

from __future__ import annotations

from typing import Any

from livekit.agents import AgentSession
from lk_agents import Triage
from support import PrivacyScan, Spans

from otel_handoff.cli.offline.livekit import ScriptedLLM


def test_scan_catches_private_text(provider: Any, privacy_scan: PrivacyScan) -> None:
    before = len(privacy_scan.leaks)
    tracer = provider.get_tracer("otel_handoff.test")
    with tracer.start_as_current_span("agent_handoff") as span:
        span.set_attribute("agent_handoff.planted", "I have a billing question")
    leaks = privacy_scan.leaks[before:]
    del privacy_scan.leaks[before:]  # this test's leak was planted on purpose
    assert leaks == ["agent_handoff agent_handoff.planted: 'I have a billing question'"]


async def test_scan_sees_real_handoff_spans(instrumented: Spans, privacy_scan: PrivacyScan) -> None:
    scanned = privacy_scan.scanned
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    await session.start(agent=Triage())
    await session.run(user_input="I have a billing question")
    await session.aclose()
    ours = [s for s in instrumented.all() if s.instrumentation_scope.name.startswith("otel_handoff")]
    # agent_handoff and its children were scanned (LiveKit's own spans stand for some, 1.8.2+)
    assert len(ours) >= 2 and privacy_scan.scanned - scanned >= len(ours)
