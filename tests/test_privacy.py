"""The privacy scan itself can fail: it catches private text, and it really scans our spans."""

from __future__ import annotations

from typing import Any

from conftest import PRIVACY_SCAN, Spans
from livekit.agents import AgentSession
from lk_agents import Triage

from otel_handoff.cli.offline.livekit import ScriptedLLM


def test_scan_catches_private_text(provider: Any) -> None:
    before = len(PRIVACY_SCAN.leaks)
    tracer = provider.get_tracer("otel_handoff.test")
    with tracer.start_as_current_span("agent_handoff") as span:
        span.set_attribute("gen_ai.input", "I have a billing question")
    leaks = PRIVACY_SCAN.leaks[before:]
    del PRIVACY_SCAN.leaks[before:]  # this test's leak was planted on purpose
    assert leaks == ["agent_handoff gen_ai.input: 'I have a billing question'"]


async def test_scan_sees_real_handoff_spans(instrumented: Spans) -> None:
    scanned = PRIVACY_SCAN.scanned
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    await session.start(agent=Triage())
    await session.run(user_input="I have a billing question")
    await session.aclose()
    assert PRIVACY_SCAN.scanned - scanned >= 4  # agent_handoff and its children were scanned
