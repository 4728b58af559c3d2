"""`otel-handoff demo` as a new user runs it: the waterfall it prints tells the handoff story."""

from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_prints_every_handoff_as_a_waterfall() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "otel_handoff", "demo"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    headers = re.findall(r"^#(\d)\s+(\S+) → (\S+)\s+(\S+)\s+[\d.]+ ms wall\s+(\w+)$", out, flags=re.M)
    assert headers == [
        ("1", "triage", "collect_email", "task", "completed"),  # an AgentTask enters...
        ("2", "collect_email", "triage", "task", "completed"),  # ...and hands back
        ("3", "triage", "billing", "tool:transfer", "completed"),
        ("1", "concierge", "specialist", "api", "completed"),
        ("2", "specialist", "supervisor", "api", "completed"),
        ("3", "supervisor", "concierge", "api", "completed"),
    ]
    blocks = out.split("\n\n")
    reuse = [line.strip() for line in out.splitlines() if line.strip().startswith("reused:")]
    assert reuse[0].startswith("reused: stt yes")  # one STT shared by the pipeline agents
    assert "realtime session yes" in reuse[3]  # the mutable realtime model is handed over
    assert "realtime session no (model)" in reuse[4]  # the supervisor brings its own model
    assert any("queue_wait" in block and "#3  supervisor" in block for block in blocks)
    for phase in ("pause", "start", "on_enter", "drain", "close", "resume", "realtime_update"):
        assert re.search(rf"^\s+{phase}\s+│", out, flags=re.M), phase
    assert "spans exported" not in out  # no OTLP endpoint, no --export: nothing claimed


def _demo(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "otel_handoff", "demo", *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_protocol_is_reported_once_with_or_without_an_endpoint() -> None:
    for endpoint in ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, {}):
        result = _demo(OTEL_EXPORTER_OTLP_PROTOCOL="bogus", **endpoint)
        assert result.returncode == 0, result.stderr[-2000:]
        lines = [line for line in result.stderr.splitlines() if "OTEL_EXPORTER_OTLP_PROTOCOL" in line]
        assert len(lines) == 1 and "'bogus'" in lines[0] and "grpc or http/protobuf" in lines[0], endpoint


def _framework_demo(framework: str, module: str) -> tuple[str, list[tuple[str, ...]]]:
    """``demo --framework``'s output and its handoff headers (#, from, to, via, outcome).

    A demo prints only its own output: nothing of the framework's log or warnings on stderr.
    """
    import pytest

    pytest.importorskip(module)
    result = _demo("--framework", framework)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == "", result.stderr[-2000:]
    header = r"^#(\d)\s+(\S+) → (\S+)\s+(\S+)\s+[\d.]+ ms wall\s+(\w+)$"
    return result.stdout, re.findall(header, result.stdout, flags=re.M)


def test_ag2_demo_prints_workflow_handoffs() -> None:
    out, headers = _framework_demo("ag2", "ag2.network")
    assert headers == [
        ("1", "reception", "triage", "transition", "completed"),
        ("2", "triage", "billing", "handoff:transfer_to_billing", "completed"),
        ("3", "billing", "(none)", "finish:finish_call", "completed"),
        ("1", "customer", "triage", "transition", "completed"),
        ("2", "triage", "supervisor", "tool_called:escalate", "completed"),
        ("3", "supervisor", "vip", "transition", "completed"),
        ("4", "vip", "(none)", "transition", "completed"),
        ("1", "triage", "billing", "transition", "completed"),
        ("2", "billing", "triage", "transition", "completed"),
        ("3", "triage", "billing", "transition", "completed"),
        ("4", "billing", "(none)", "max_turns", "completed"),
    ]
    assert "reused:" not in out  # LiveKit's resource line only where it means something
    # one block per channel (AG2 traces each turn apart), each saying which scenario it is
    blocks = re.findall(r"^conversation \S+ · (\d) handoffs · (.+)$", out, flags=re.M)
    assert blocks == [
        ("3", "a tool hands off (Handoff), another ends the channel (Finish)"),
        ("4", "a ToolCalled rule, then ContextEquals rules"),
        ("4", "FromSpeaker ping-pong until max_turns"),
    ]


def test_pipecat_demo_prints_node_transitions_then_a_worker_handoff() -> None:
    out, headers = _framework_demo("pipecat", "pipecat.flows")
    assert headers == [
        ("1", "greeting", "booking", "tool:go_to_booking", "completed"),
        ("2", "booking", "wrap_up", "api", "completed"),
        ("1", "triage", "billing", "tool:transfer_to", "completed"),
    ]
    phases = ("handler", "pre_actions", "context_update", "drain", "bus_crossing", "setup", "await_old_audio")
    for phase in (*phases, "first_output"):
        assert re.search(rf"^\s+{phase}\s+│", out, flags=re.M), phase


def test_openai_agents_demo_prints_a_text_chain_and_a_realtime_handoff() -> None:
    out, headers = _framework_demo("openai-agents", "agents.testing")
    assert headers == [
        ("1", "triage", "billing", "tool:transfer_to_billing", "completed"),
        ("2", "billing", "refunds", "tool:transfer_to_refunds", "completed"),
        ("1", "triage", "billing", "realtime_tool:transfer_to_billing", "completed"),
    ]
    blocks = re.findall(r"^conversation (\S+) · \d handoffs? · (.+)$", out, flags=re.M)
    assert [conversation for conversation, _ in blocks] == ["demo-text-run", "sess_loopback"]
    for phase in (
        "on_handoff",
        "input_filter",
        "setup",
        "first_output",
        "settings",
        "session_update",
        "response_drain",
        "first_audio",
    ):
        assert re.search(rf"^\s+{phase}\s+│", out, flags=re.M), phase
