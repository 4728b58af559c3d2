"""Google ADK as a user meets it: the demo, and an unmodified app traced by the variable or by
``opentelemetry-instrument``, exporting to a real collector (rotel). Runs in ADK's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("google.adk", reason="google-adk runs in its own environment (test_environments)")

from receivers import Rotel, wait_until

from otel_handoff.core import schema as sc

BIN = Path(sys.executable).parent
APP = Path(__file__).parent / "scripts" / "offline_google_adk.py"


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    result = subprocess.run(command, env=base | env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_adk_app_exports_its_transfer_in_adks_trace(rotel: Rotel, how: str) -> None:
    command = [sys.executable, str(APP)]
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "adk-app",
    }
    if how == "variable":
        env["OTEL_HANDOFF_AUTO_INSTRUMENT"] = "true"
    else:
        command = [str(BIN / "opentelemetry-instrument"), *command]
    result = run(command, **env)
    assert "answered by: billing" in result.stdout, "the app itself must still work"
    assert "otel-handoff" not in result.stderr
    wait_until(
        lambda: any(s["name"] == sc.SPAN_HANDOFF for s in rotel.spans()), "the handoff at the collector"
    )
    spans = rotel.spans()
    [handoff] = [s for s in spans if s["name"] == sc.SPAN_HANDOFF]
    attributes = handoff["attributes"]
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_GOOGLE_ADK
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert handoff["resource"]["service.name"] == "adk-app"
    # ADK's own spans went to the same provider: ours sits under the transferring agent's span, or,
    # where that span ends before the handoff does (2.x), beside it under its parent
    [agent] = [s for s in spans if s["name"] == "invoke_agent triage"]
    assert handoff["parent_id"] in (agent["span_id"], agent["parent_id"])
    assert handoff["parent_id"] is not None
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == agent["attributes"][sc.GEN_AI_CONVERSATION_ID]
    phases = sorted(s["name"] for s in spans if s["parent_id"] == handoff["span_id"])
    assert phases == sorted(
        [sc.SPAN_DELIVERY, sc.SPAN_TOOL, sc.SPAN_DELIVERY, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT]
    )


def test_the_demo(tmp_path: Path) -> None:
    export = tmp_path / "spans.jsonl"
    result = run([str(BIN / "otel-handoff"), "demo", "--framework", "google-adk", "--export", str(export)])
    out = result.stdout
    assert "triage → billing  tool:transfer_to_agent" in out
    assert "triage → billing  live_tool:transfer_to_agent" in out
    for phase in ("delivery", "first_output", "transfer_delay", "connect", "send_history", "first_audio"):
        assert f"    {phase} " in out, phase
    # the remote transfer (a2a-sdk is in ADK's environment): the serving process's set-up joins in
    remote = out[out.index("demo-remote-session") :]
    assert remote.count("triage → billing  tool:transfer_to_agent") == 2
    for phase in ("connect", "request", "remote_setup", "first_output"):
        assert remote.count(f"    {phase} ") == 2, phase
    summary = run([str(BIN / "otel-handoff"), "summary", str(export)]).stdout
    # the server's remote_setup is its own process's to export: the demo's file holds the caller's
    assert "google-adk" in summary and "transfer_delay" in summary and "request" in summary
