"""No code changes: OTEL_HANDOFF_AUTO_INSTRUMENT and `opentelemetry-instrument`, as real subprocesses.

An unmodified offline agent (tests/scripts/offline_agent.py) is run the way a user runs
`python agent.py`, exporting over OTLP to a real collector (rotel), whose output is read back.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from receivers import Rotel, wait_until

from otel_handoff import _auto
from otel_handoff.core import schema as sc
from otel_handoff.core.frameworks import any_hint

AGENT = Path(__file__).parent / "scripts" / "offline_agent.py"
BIN = Path(sys.executable).parent


def run(
    command: list[str], rotel: Rotel | None = None, expect: str = "current agent: Billing", **env: str
) -> subprocess.CompletedProcess[str]:
    """Run with a clean OTEL_* environment plus `env`, exporting to `rotel` if given.

    ``expect``: what the app prints when it worked (instrumentation must never change that)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    if rotel is not None:
        base |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint,
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "auto-agent",
        }
    result = subprocess.run(
        command, env=base | env, capture_output=True, text=True, timeout=120, cwd=AGENT.parent
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert expect in result.stdout, "the app itself must still work"
    return result


def handoffs(rotel: Rotel, expect: int) -> list[dict[str, Any]]:
    """Handoff spans that reached the collector (waits for `expect` of them, bounded)."""
    if expect == 0:
        # the process has exited and flushed: the LiveKit spans prove the export worked
        wait_until(lambda: any(s["name"] == "agent_session" for s in rotel.spans()), "LiveKit's spans")
    else:
        wait_until(
            lambda: len([s for s in rotel.spans() if s["name"] == sc.SPAN_HANDOFF]) >= expect,
            "handoff spans at the collector",
        )
    return [s for s in rotel.spans() if s["name"] == sc.SPAN_HANDOFF]


@pytest.mark.parametrize("order", ["livekit-first", "otel-handoff-first"])
def test_variable_alone_exports_handoffs(rotel: Rotel, order: str) -> None:
    flags = ["--otel-handoff-first"] if order == "otel-handoff-first" else []
    result = run([sys.executable, str(AGENT), *flags], rotel, OTEL_HANDOFF_AUTO_INSTRUMENT="true")
    [handoff] = handoffs(rotel, 1)
    assert handoff["attributes"][sc.TRIGGER] == "tool"
    assert handoff["attributes"][sc.GEN_AI_TOOL_NAME] == "transfer"
    assert handoff["resource"]["service.name"] == "auto-agent"
    # in the same trace as LiveKit's own spans: one provider for both
    [session] = [s for s in rotel.spans() if s["name"] == "agent_session"]
    assert handoff["trace_id"] == session["trace_id"]
    assert "otel-handoff" not in result.stderr  # nothing to warn about


def test_opentelemetry_instrument_picks_up_the_entry_point(rotel: Rotel) -> None:
    run([str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)], rotel)
    [handoff] = handoffs(rotel, 1)
    assert handoff["attributes"][sc.FRAMEWORK] == "livekit-agents"


def test_opentelemetry_instrument_without_a_distro_says_so(rotel: Rotel) -> None:
    """Without opentelemetry-distro nothing sets up the SDK (simulated: no distro, no configurator
    by those names): one line says what to install, where there was silence."""
    from otel_handoff.core.instrumentor import NO_SDK_UNDER_OPENTELEMETRY_INSTRUMENT

    command = [str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)]
    result = run(command, rotel, OTEL_PYTHON_DISTRO="absent", OTEL_PYTHON_CONFIGURATOR="absent")
    assert result.stderr.count(NO_SDK_UNDER_OPENTELEMETRY_INSTRUMENT) == 1, result.stderr[-3000:]
    with_distro = run(command, rotel)
    assert NO_SDK_UNDER_OPENTELEMETRY_INSTRUMENT not in with_distro.stderr


def test_variable_and_opentelemetry_instrument_instrument_once(rotel: Rotel) -> None:
    command = [str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)]
    result = run(command, rotel, OTEL_HANDOFF_AUTO_INSTRUMENT="yes")
    assert len(handoffs(rotel, 1)) == 1
    assert "already instrumented" not in result.stderr


def test_disabled_under_opentelemetry_instrument_emits_no_handoffs(rotel: Rotel) -> None:
    command = [str(BIN / "opentelemetry-instrument"), sys.executable, str(AGENT)]
    run(command, rotel, OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="livekit_handoff")
    assert handoffs(rotel, 0) == []


def test_disabled_with_the_variable_instruments_nothing() -> None:
    probe = (
        "import livekit.agents.voice.agent_session as s, wrapt; "
        "print(isinstance(s.AgentSession.__dict__['update_agent'], wrapt.FunctionWrapper))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for disabled, patched in (("livekit_handoff", "False"), ("", "True"), ("flask,livekit_handoff", "False")):
        env |= {_auto.ENV: "true", _auto.DISABLED_ENV: disabled}
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        assert result.stdout.strip() == patched, (disabled, result.stderr)


def test_unset_variable_imports_nothing_of_ours() -> None:
    probe = (
        "import livekit.agents, sys; print(sorted(m for m in sys.modules if m.startswith('otel_handoff')))"
    )
    for value in (None, "false", "0", "no"):
        env = {k: v for k, v in os.environ.items() if k != _auto.ENV}
        if value is not None:
            env[_auto.ENV] = value
        result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
        assert result.stdout.strip() == "[]", (value, result.stdout, result.stderr)
        assert result.stderr == ""


def test_bad_value_warns_once_and_runs_uninstrumented(rotel: Rotel) -> None:
    result = run([sys.executable, str(AGENT)], rotel, OTEL_HANDOFF_AUTO_INSTRUMENT="maybe")
    warnings = [line for line in result.stderr.splitlines() if "otel-handoff" in line]
    assert warnings == [
        "otel-handoff: OTEL_HANDOFF_AUTO_INSTRUMENT='maybe' is not understood; use true, 1 or yes "
        "(or unset it). Handoffs are not traced."
    ]


def test_unsupported_framework_version_warns_once(rotel: Rotel, tmp_path: Path) -> None:
    """livekit-agents' metadata claims 0.12 (a dist-info ahead on the path); the code is the real one."""
    fake = tmp_path / "site" / "livekit_agents-0.12.0.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: livekit-agents\nVersion: 0.12.0\n")
    result = run(
        [sys.executable, str(AGENT)],
        None,
        OTEL_HANDOFF_AUTO_INSTRUMENT="true",
        PYTHONPATH=str(tmp_path / "site"),
        OTEL_TRACES_EXPORTER="none",
    )
    warnings = [line for line in result.stderr.splitlines() if "otel-handoff" in line]
    assert len(warnings) == 1, result.stderr
    assert "livekit-agents" in warnings[0] and "0.12.0" in warnings[0]
    assert re.search(r"pip install (-e )?'[^']*\[livekit\]'", warnings[0]), warnings[0]


def test_no_framework_installed_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(_auto.ENV, "true")
    monkeypatch.setattr(_auto, "installed", lambda framework: None)
    monkeypatch.setattr(_auto, "_started", False)
    caplog.set_level(logging.WARNING, logger="otel_handoff")
    _auto.start()
    _auto.start()  # a venv's lib64 symlink runs the .pth twice: still one line
    assert [r.getMessage() for r in caplog.records] == [
        "otel-handoff: OTEL_HANDOFF_AUTO_INSTRUMENT is set but no supported framework is installed; "
        f"{any_hint()}. Nothing is traced."
    ]
    assert any_hint().endswith(
        "[livekit]' (or [ag2], [pipecat], [openai-agents], [google-adk], [langgraph], [llama-index], "
        "[strands], [agent-framework])"
    )


def test_the_start_up_hook_is_installed() -> None:
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    assert any((Path(d) / "otel_handoff_auto.pth").exists() for d in dirs), dirs
    assert shutil.which("opentelemetry-instrument", path=str(BIN))


AG2_APP = Path(__file__).parent / "scripts" / "offline_ag2_workflow.py"
PIPECAT_APP = Path(__file__).parent / "scripts" / "offline_pipecat_flow.py"
OPENAI_AGENTS_APP = Path(__file__).parent / "scripts" / "offline_openai_agents.py"


def run_unmodified(app: Path, how: str, rotel: Rotel, expect: str) -> None:
    """Run a user's app untouched, traced by the variable or by `opentelemetry-instrument`."""
    command = [sys.executable, str(app)]
    env = {"OTEL_HANDOFF_AUTO_INSTRUMENT": "true"}
    if how == "opentelemetry-instrument":
        command, env = [str(BIN / "opentelemetry-instrument"), *command], {}
    result = run(command, rotel, expect=expect, **env)
    assert "otel-handoff" not in result.stderr  # LiveKit is installed too: nothing to warn about


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_ag2_workflow_app_exports_handoffs(rotel: Rotel, how: str) -> None:
    pytest.importorskip("ag2.network", reason="needs ag2 >= 1")
    run_unmodified(AG2_APP, how, rotel, expect="closed: max_turns")
    found = handoffs(rotel, 4)
    kinds = [s["attributes"][sc.KIND] for s in sorted(found, key=lambda s: s["attributes"][sc.SEQUENCE])]
    assert kinds == ["transition", "transition", "handoff", "max_turns"]
    assert {s["attributes"][sc.FRAMEWORK] for s in found} == {"ag2"}
    assert {s["resource"]["service.name"] for s in found} == {"auto-agent"}


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_pipecat_flows_app_exports_transitions(rotel: Rotel, how: str) -> None:
    pytest.importorskip("pipecat.flows", reason="needs pipecat-ai >= 1.5.0")
    run_unmodified(PIPECAT_APP, how, rotel, expect="final node: booking")
    [handoff] = handoffs(rotel, 1)
    attributes = handoff["attributes"]
    assert (attributes[sc.FRAMEWORK], attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME]) == (
        sc.FRAMEWORK_PIPECAT,
        "tool",
        "go_to_booking",
    )
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == (
        "greeting",
        "booking",
    )
    assert handoff["resource"]["service.name"] == "auto-agent"


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_openai_agents_app_exports_handoffs(rotel: Rotel, how: str) -> None:
    pytest.importorskip("agents.testing", reason="needs openai-agents >= 0.21.0")
    run_unmodified(OPENAI_AGENTS_APP, how, rotel, expect="answered by: billing")
    [handoff] = handoffs(rotel, 1)
    attributes = handoff["attributes"]
    assert (attributes[sc.FRAMEWORK], attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME]) == (
        sc.FRAMEWORK_OPENAI_AGENTS,
        "tool",
        "transfer_to_billing",
    )
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.STREAMED] is True
    phases = {s["name"] for s in rotel.spans() if s["parent_id"] == handoff["span_id"]}
    assert phases == {sc.SPAN_ON_HANDOFF, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT}
    assert handoff["resource"]["service.name"] == "auto-agent"


LANGGRAPH_APP = Path(__file__).parent / "scripts" / "offline_langgraph.py"


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_langgraph_app_exports_handoffs(rotel: Rotel, how: str) -> None:
    pytest.importorskip("langgraph_swarm", reason="needs langgraph and langgraph-swarm")
    run_unmodified(LANGGRAPH_APP, how, rotel, expect="active agent: billing")
    [handoff] = handoffs(rotel, 1)
    attributes = handoff["attributes"]
    assert (attributes[sc.FRAMEWORK], attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME]) == (
        sc.FRAMEWORK_LANGGRAPH,
        "tool",
        "transfer_to_billing",
    )
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == "t-1"
    phases = {s["name"] for s in rotel.spans() if s["parent_id"] == handoff["span_id"]}
    assert phases == {sc.SPAN_HANDLER, sc.SPAN_CONTEXT_UPDATE, sc.SPAN_START, sc.SPAN_FIRST_OUTPUT}
    assert handoff["resource"]["service.name"] == "auto-agent"


AGENT_FRAMEWORK_APP = Path(__file__).parent / "scripts" / "offline_agent_framework.py"


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_unmodified_agent_framework_app_exports_handoffs(rotel: Rotel, how: str) -> None:
    pytest.importorskip("agent_framework_orchestrations", reason="needs agent-framework-orchestrations")
    run_unmodified(AGENT_FRAMEWORK_APP, how, rotel, expect="handoffs: [('triage', 'billing')]")
    [handoff] = handoffs(rotel, 1)
    attributes = handoff["attributes"]
    assert (attributes[sc.FRAMEWORK], attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME]) == (
        sc.FRAMEWORK_AGENT_FRAMEWORK,
        "tool",
        "handoff_to_billing",
    )
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    phases = {s["name"] for s in rotel.spans() if s["parent_id"] == handoff["span_id"]}
    assert phases == {
        sc.SPAN_HANDLER,
        sc.SPAN_CONTEXT_UPDATE,
        sc.SPAN_DISPATCH,
        sc.SPAN_SETUP,
        sc.SPAN_FIRST_OUTPUT,
    }
    assert handoff["resource"]["service.name"] == "auto-agent"


LAZY_APP = Path(__file__).resolve().parent / "scripts" / "lazy_app.py"


@pytest.mark.parametrize("how", ["configure", "opentelemetry-instrument", "uninstrument"])
def test_no_framework_imported_that_the_app_does_not_use(how: str) -> None:
    """Every framework installed, an OpenAI-only app: configure() and opentelemetry-instrument import
    none of the others, and instrument the SDK when the app imports it; an instrumentor undone
    before that import leaves it alone."""
    command = [sys.executable, str(LAZY_APP), "plain" if how == "opentelemetry-instrument" else how]
    if how == "opentelemetry-instrument":
        command.insert(0, str(BIN / "opentelemetry-instrument"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}
    # openinference's instrumentor (installed for other tests) imports the SDK at start-up itself
    env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = "openai_agents"
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    assert report["imported_before_the_app"] == []
    assert report["imported"] == ["agents"]
    assert report["instrumented"] is (how != "uninstrument")
    handoff_spans = result.stdout.count('"name": "agent_handoff"')
    assert handoff_spans == (0 if how == "uninstrument" else 1), result.stdout[-2000:]


# --- a server: Pipecat's development runner serves its bots with uvicorn ------------------------
SERVER_APP = Path(__file__).parent / "scripts" / "uvicorn_app.py"


def _serve(rotel: Rotel, **env: str) -> tuple[subprocess.Popen[str], int]:
    """The unmodified uvicorn app, auto-instrumented, exporting only on a flush (60 s timer)."""
    pytest.importorskip("pipecat.flows", reason="needs pipecat-ai >= 1.5.0")
    pytest.importorskip("fastapi.telemetry", reason="FastAPI's own telemetry (the runner's extra)")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    base |= {
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "served-app",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # no timer delivers within the test: only a flush
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, str(SERVER_APP)],
        env=base | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=SERVER_APP.parent,
    )
    assert process.stdout is not None
    line = process.stdout.readline().split()
    assert line[:1] == ["listening"], (line, process.stderr.read() if process.poll() is not None else "")
    return process, int(line[1])


def _get(port: int, path: str) -> bytes:
    import urllib.request

    # the server answers once it has started (the port was bound before): retry until it does
    answer: list[bytes] = []

    def served() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                answer.append(response.read())
        except OSError:
            return False
        return True

    wait_until(served, "the server to answer", timeout=60, every=0.1)
    return answer[0]


def test_a_served_app_exports_its_requests_from_the_first_and_flushes_at_sigterm(rotel: Rotel) -> None:
    """The app's first request (FastAPI's own span) is exported, not only what follows the first
    conversation: exporting is configured once uvicorn has started. And SIGTERM, which uvicorn
    answers with a graceful shutdown and then the signal re-raised (the process dies of it, no
    ``atexit``), loses nothing: every provider is flushed when that shutdown ends. The process
    still ends as uvicorn ends it, by the signal."""
    process, port = _serve(rotel)
    try:
        assert _get(port, "/hello") == b'{"hello":"caller"}'
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM, (process.returncode, err[-3000:])
    wait_until(lambda: any(s["name"] == "GET /hello" for s in rotel.spans()), "the request's span")
    (span,) = [s for s in rotel.spans() if s["name"] == "GET /hello"]
    assert span["resource"]["service.name"] == "served-app"


def test_a_served_app_that_installs_its_provider_at_start_up_keeps_it(rotel: Rotel) -> None:
    """An app that installs its own tracer provider in its lifespan start-up keeps it: exporting
    is configured after that start-up, and never replaces an application's provider."""
    process, port = _serve(rotel, APP_PROVIDER="lifespan")
    try:
        _get(port, "/hello")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert "own provider kept: True" in out, (out, err[-3000:])
    assert "Overriding of current TracerProvider" not in err, err[-3000:]
