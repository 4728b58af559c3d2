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
    headers = re.findall(r"^#(\d)\s+(\S+) → (\S+)\s+(\S+)\s+[\d.]+ ms\s+(\w+)$", out, flags=re.M)
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
