"""`otel-handoff doctor` as a user runs it: a real process, a real collector or none."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from environments import ADK_REQUIREMENTS, environment
from receivers import Phoenix, Rotel, refused_port, shared_phoenix

DOCTOR = [sys.executable, "-m", "otel_handoff", "doctor"]


def doctor(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(DOCTOR, env=base | env, capture_output=True, text=True, timeout=60)


def test_healthy_environment(rotel: Rotel) -> None:
    result = doctor(OTEL_EXPORTER_OTLP_ENDPOINT=rotel.grpc_endpoint, OTEL_HANDOFF_AUTO_INSTRUMENT="true")
    assert result.returncode == 0, result.stdout
    assert "livekit-agents 1." in result.stdout and "will be traced" in result.stdout
    assert f"traces: otlp/grpc -> {rotel.grpc_endpoint}: answers" in result.stdout
    assert "start-up hook: " in result.stdout and "MISSING" not in result.stdout
    assert result.stdout.rstrip().endswith("No problems found.")


def test_endpoint_that_does_not_answer() -> None:
    with refused_port() as port:
        endpoint = f"http://127.0.0.1:{port}"
        result = doctor(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert result.returncode == 1
    assert f"the OTLP endpoint {endpoint} does not answer" in result.stdout
    assert "fix: start the collector there" in result.stdout


def test_each_misconfiguration_named_with_its_fix() -> None:
    result = doctor(
        OTEL_HANDOFF_AUTO_INSTRUMENT="maybe",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/json",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="ag2_handoff",
    )
    assert result.returncode == 1
    assert "1 problem" not in result.stdout and "2 problem(s):" in result.stdout
    assert "OTEL_HANDOFF_AUTO_INSTRUMENT='maybe' is not understood" in result.stdout
    assert "OTEL_EXPORTER_OTLP_PROTOCOL is 'http/json'\n    fix: use grpc or http/protobuf" in result.stdout
    assert "ag2_handoff: disabled by OTEL_PYTHON_DISABLED_INSTRUMENTATIONS" in result.stdout


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with shared_phoenix(tmp_path_factory) as server:
        yield server


def test_a_receiver_that_takes_spans_but_not_metrics(phoenix: Phoenix) -> None:
    """Phoenix over http/protobuf takes traces and answers 405 to metrics: a problem, with the fix."""
    settings = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.url}
    result = doctor(**settings)
    assert result.returncode == 1, result.stdout
    assert f"traces: otlp/http/protobuf -> {phoenix.url}/v1/traces: answers" in result.stdout
    assert (
        f"the OTLP endpoint {phoenix.url}/v1/metrics does not take metrics (answers HTTP 405" in result.stdout
    )
    assert "OTEL_METRICS_EXPORTER=none" in result.stdout
    assert doctor(**settings, OTEL_METRICS_EXPORTER="none").returncode == 0


def test_says_whether_opentelemetry_instrument_would_set_up_the_sdk() -> None:
    assert "opentelemetry-instrument: sets up the SDK" in doctor().stdout  # the test venv has the distro
    without = doctor(OTEL_PYTHON_CONFIGURATOR="absent").stdout  # as if it were not installed
    assert "opentelemetry-instrument: would export nothing" in without
    assert "pip install opentelemetry-distro" in without


# --- what the installed frameworks require ------------------------------------------------------
def distribution(folder: Path, name: str, version: str, *requires: str, metadata: str | None = None) -> Path:
    """A ``.dist-info`` folder in ``folder``, as pip leaves one: importlib.metadata reads it like any
    installed distribution once ``folder`` is on ``sys.path`` (PYTHONPATH: ahead of site-packages)."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    text = metadata or "".join(
        [
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            *(f"Requires-Dist: {r}\n" for r in requires),
        ]
    )
    (info / "METADATA").write_text(text)
    return folder


def test_the_requirements_of_every_installed_framework_are_met_here() -> None:
    result = doctor()
    section = result.stdout.split("Requirements\n")[1].split("\nAuto-instrumentation")[0]
    assert "livekit-agents 1." in section and section.endswith("every requirement met"), section


def test_google_adk_installed_beside_livekit_as_pip_leaves_it(tmp_path: Path) -> None:
    """The newcomer's environment: `pip install 'otel-handoff[google-adk]'` into the LiveKit venv
    exits 0 and moves opentelemetry-sdk down to google-adk's cap. Here the real google-adk's own
    metadata (from ADK's environment) and opentelemetry-sdk 1.44.0's stand on the path."""
    if sys.version_info < (3, 11):
        pytest.skip("google-adk 2.x needs Python 3.11")
    venv = environment(".venv-google-adk", ADK_REQUIREMENTS)
    (real,) = venv.glob("lib/python*/site-packages/google_adk-*.dist-info/METADATA")
    version = real.parent.name.removesuffix(".dist-info").split("-")[1]
    distribution(tmp_path, "google-adk", version, metadata=real.read_text())
    distribution(tmp_path, "opentelemetry-sdk", "1.44.0", "opentelemetry-api==1.44.0")
    result = doctor(PYTHONPATH=str(tmp_path), OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    clash = next(
        line for line in lines if line.startswith("  livekit-agents") and "opentelemetry-sdk" in line
    )
    assert "but opentelemetry-sdk 1.44.0 is installed" in clash
    assert f"which google-adk {version} needs (opentelemetry-sdk" in clash, clash
    problem = lines.index(next(line for line in lines if "cannot share an environment" in line))
    assert "LiveKit Agents and Google ADK cannot share an environment" in lines[problem]
    fix = lines[problem + 1]
    assert (
        "fix: one virtual environment per side: Google ADK in its own (python3 -m venv .venv-google-adk"
        in fix
    )
    assert "[google-adk]'" in fix and "pip uninstall google-adk" in fix and "[livekit]' again" in fix
    # what docs/tools.md quotes of it, versions aside
    tools = " ".join((Path(__file__).parent.parent / "docs" / "tools.md").read_text().split())
    quoted = re.search(r"`doctor` then says `([^`]+)`", tools)
    assert quoted is not None and numbers_aside(quoted.group(1)) in numbers_aside(lines[problem])


def numbers_aside(text: str) -> str:
    return re.sub(r"\d+(\.\d+)*", "N", text)


def test_a_requirement_not_installed_and_one_no_other_framework_pins(tmp_path: Path) -> None:
    """A framework needing what is missing, and a newer idna than installed (no framework's own
    distribution pins idna): pip's fix, no environment split."""
    distribution(tmp_path, "pipecat-ai", "1.14.0", "not-installed-anywhere>=1", "idna>=999")
    result = doctor(PYTHONPATH=str(tmp_path), OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    assert result.returncode == 1, result.stdout
    assert "  pipecat-ai 1.14.0 needs not-installed-anywhere>=1, which is not installed" in result.stdout
    assert "fix: pip install 'not-installed-anywhere>=1'" in result.stdout
    assert "  pipecat-ai 1.14.0 needs idna>=999, but idna " in result.stdout
    assert "fix: pip install 'idna>=999'" in result.stdout
    assert "cannot share an environment" not in result.stdout


def test_two_frameworks_pinning_apart(tmp_path: Path) -> None:
    """Pipecat needing an opentelemetry-api that livekit-agents' own pin rules out: one venv each."""
    distribution(tmp_path, "pipecat-ai", "1.14.0", "opentelemetry-api>=99")
    result = doctor(PYTHONPATH=str(tmp_path), OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none")
    assert "but opentelemetry-api 1." in result.stdout and "which livekit-agents 1." in result.stdout
    assert (
        "  ✗ Pipecat Flows and LiveKit Agents cannot share an environment: pipecat-ai 1.14.0 needs"
        in result.stdout
    )
    assert (
        "fix: one virtual environment per side: LiveKit Agents in its own (python3 -m venv .venv-livekit"
        in result.stdout
    )


def test_frameworks_by_the_names_demo_takes() -> None:
    from otel_handoff.core.frameworks import BY_KEY

    lines = doctor().stdout.split("Frameworks\n")[1].split("\nRequirements")[0].splitlines()
    assert [line.split()[0] for line in lines] == list(BY_KEY), lines


def test_no_endpoint_set_is_a_note_not_a_problem() -> None:
    """As after "Try it": the demo ran without an endpoint, so doctor exits 0 and says where spans
    could go. (Something at localhost:4317 answers instead, on a machine that runs a collector.)"""
    result = doctor()
    assert result.returncode == 0, result.stdout
    assert "problem(s)" not in result.stdout
    if "traces: otlp/grpc -> http://localhost:4317: answers" not in result.stdout:
        assert (
            "note: no OTLP endpoint is set and nothing answers at the default http://localhost:4317: "
            "the app's spans and metrics go nowhere\n    to see them, set OTEL_EXPORTER_OTLP_ENDPOINT to a "
            "receiver's, or write spans to a file: OTEL_TRACES_EXPORTER=otel_handoff_file "
            "OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none"
        ) in result.stdout


def test_the_service_name_it_names_is_the_one_an_app_run_with_python_gets(tmp_path: Path) -> None:
    import json

    said = re.search(r"service\.name: .*", doctor().stdout)
    assert said is not None
    assert "e.g. unknown_service:python for `python agent.py`" in said.group(0)
    assert "python3" not in said.group(0)  # doctor's own interpreter, which the app's need not be
    app = "import otel_handoff\nfrom opentelemetry import trace\notel_handoff.configure()\n"
    app += "trace.get_tracer('app').start_span('work').end()\n"
    (tmp_path / "agent.py").write_text(app)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "OTEL_TRACES_EXPORTER": "otel_handoff_file",
        "OTEL_HANDOFF_EXPORT_FILE": "spans.jsonl",
        "OTEL_METRICS_EXPORTER": "none",
    }
    python = Path(sys.executable).with_name("python")
    run = subprocess.run(
        [str(python), "agent.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    [line] = (tmp_path / "spans.jsonl").read_text().splitlines()
    attributes = json.loads(line)["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "unknown_service:python"}} in attributes
