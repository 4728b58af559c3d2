"""`otel-handoff doctor` as a user runs it: a real process, a real collector or none."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
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
