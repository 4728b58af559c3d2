"""Every CPython from 3.10 that our machines carry: what we traced reaches the receiver however
the app ends.

Each interpreter gets an environment of its own (``.venv-py3.X``: the project, the OpenAI Agents
SDK, opentelemetry-distro, uvicorn). There ``tests/scripts/exit_app.py`` sets tracing up three
ways (``configure()``, the variable, ``opentelemetry-instrument``) and ends seven ways (normally,
``sys.exit(3)``, an uncaught exception, a non-daemon thread still running, a fork and a spawn job
process ending at ``os._exit`` after multiprocessing's finalizers, a uvicorn server stopped by
SIGTERM). CPython 3.12, whose shutdown once lost every span, runs all 21 pairs; every other
interpreter runs each end once, its set-up rotating with the interpreter (``cases``), so that every
interpreter meets every end and every set-up, and every pair of set-up and end is met on some
interpreter besides 3.12: 7 runs, not 21, at about 3 s of CPU each. The batch delay is 60 s and
the conversation-end flush is off, so only the process's end can deliver: every run's handoff
and the app's last span must reach a real collector (rotel) over OTLP/HTTP, and nothing of ours
be logged at WARNING or above. CPython 3.12 refuses to start a
thread at interpreter shutdown: the exit once started one and lost every span there.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import environments
import pytest
from receivers import IN_CI, Rotel, wait_until

from otel_handoff.core import schema as sc

APP = Path(__file__).parent / "scripts" / "exit_app.py"
SETUPS = ("configure", "env", "instrument")
ENDS = ("normal", "exit", "raise", "thread", "job-fork", "job-spawn", "serve")
EXIT_CODES = {"exit": {3}, "raise": {1}, "serve": {0, -signal.SIGTERM}}  # uvicorn re-raises SIGTERM
PYTHONS = environments.pythons()
EVERY_PAIR = "3.12"  # the interpreter whose shutdown refuses new threads: every set-up with every end


def cases(minor: str) -> list[tuple[str, str]]:
    """The (set-up, end) runs of one interpreter: all 21 on 3.12, else each end once, the set-up
    turning with the interpreter's place, so that 3.10, 3.11 and 3.13 cover every pair between them."""
    if minor == EVERY_PAIR:
        return [(setup, end) for setup in SETUPS for end in ENDS]
    others = sorted(m for m in PYTHONS if m != EVERY_PAIR)
    turn = others.index(minor) if minor in others else 0
    return [(SETUPS[(turn + i) % len(SETUPS)], end) for i, end in enumerate(ENDS)]


def test_every_python_our_machines_carry_is_tested() -> None:
    missing = [minor for minor in environments.PYTHONS_EXPECTED if minor not in PYTHONS]
    if missing and IN_CI:
        pytest.fail(f"no CPython {', '.join(missing)} on this machine (pyenv install them)", pytrace=False)
    if missing:
        pytest.skip(f"no CPython {', '.join(missing)} here")


@dataclass
class Run:
    setup: str
    end: str
    returncode: int
    stderr: str

    @property
    def service(self) -> str:
        return service_name(self.setup, self.end)


def service_name(setup: str, end: str) -> str:
    return f"exit-{setup}-{end}"


def run_app(python: Path, endpoint: str, setup: str, end: str) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env |= {
        "OTEL_SERVICE_NAME": service_name(setup, end),
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # no timer delivers: only the process's end
        "OTEL_HANDOFF_CONVERSATION_FLUSH": "off",  # nor the conversation's end
    }
    command = [str(python), str(APP), setup, end]
    if setup == "env":
        env["OTEL_HANDOFF_AUTO_INSTRUMENT"] = "true"
    if setup == "instrument":
        command = [str(python.parent / "opentelemetry-instrument"), *command]
    if end != "serve":
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        return Run(setup, end, done.returncode, done.stderr)
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[-1])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=60) as answer:
            assert answer.read() == b"billing"
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    finally:
        server.kill()
    return Run(setup, end, server.returncode, stderr)


def test_the_interpreters_between_them_run_every_pair() -> None:
    others = [minor for minor in PYTHONS if minor != EVERY_PAIR]
    if len(others) < len(SETUPS):
        pytest.skip(f"{len(others)} interpreters besides {EVERY_PAIR}: fewer than the set-ups")
    assert {case for minor in others for case in cases(minor)} == set(itertools.product(SETUPS, ENDS))
    assert all({setup for setup, _ in cases(minor)} == set(SETUPS) for minor in PYTHONS)


@pytest.mark.parametrize("minor", list(PYTHONS))
def test_every_span_arrives_however_the_app_ends(rotel: Rotel, minor: str) -> None:
    venv = environments.environment(
        f".venv-py{minor}", environments.EVERY_PYTHON_REQUIREMENTS, PYTHONS[minor]
    )
    python = venv / "bin" / "python"
    with ThreadPoolExecutor(max_workers=3) as pool:
        runs = list(pool.map(lambda case: run_app(python, rotel.http_endpoint, *case), cases(minor)))

    def received() -> dict[str, set[str]]:
        by_service: dict[str, set[str]] = {}
        for span in rotel.spans():
            by_service.setdefault(span["resource"].get("service.name"), set()).add(span["name"])
        return by_service

    def everything(by_service: dict[str, set[str]]) -> bool:
        return all(
            {sc.SPAN_HANDOFF, f"after-{run.end}"} <= by_service.get(run.service, set()) for run in runs
        )

    # sent before each process went (the receiver answered); rotel prints what it took a moment later
    with contextlib.suppress(AssertionError):
        wait_until(lambda: everything(received()) or None, "every run's spans in rotel's output", timeout=15)
    by_service = received()
    failures = []
    for run in runs:
        expected_code = EXIT_CODES.get(run.end, {0})
        ours = [line for line in run.stderr.splitlines() if "otel-handoff" in line or "otel_handoff" in line]
        got = by_service.get(run.service, set())
        wanted = {sc.SPAN_HANDOFF, f"after-{run.end}"}
        if run.returncode not in expected_code or not wanted <= got or ours or "new thread" in run.stderr:
            failures.append(
                f"{run.setup}/{run.end}: exit {run.returncode}, "
                f"spans {sorted(got & wanted)} of {sorted(wanted)}"
                f"\n{run.stderr[-1500:]}"
            )
    assert not failures, f"CPython {minor}:\n" + "\n".join(failures)
