"""Frameworks that cannot share the suite's environment, tested in one of their own
(``tests/environments.py``): their test modules run there, as the version matrix runs them on
the framework's other releases."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from environments import ADK_REQUIREMENTS, ROOT, STRANDS_REQUIREMENTS, environment
from receivers import IN_CI

ADK_TESTS = [
    "tests/test_google_adk.py",
    "tests/test_google_adk_user.py",
    "tests/test_google_adk_remote.py",
    "tests/test_conversation_leaks.py",
]
STRANDS_TESTS = ["tests/test_strands.py", "tests/test_strands_a2a.py", "tests/test_conversation_leaks.py"]


def test_google_adk_in_its_own_environment() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("google-adk 2.x needs Python 3.11")
    run_in(".venv-google-adk", ADK_REQUIREMENTS, ADK_TESTS)


def test_strands_in_its_own_environment() -> None:
    run_in(".venv-strands", STRANDS_REQUIREMENTS, STRANDS_TESTS)


def run_in(name: str, requirements: list[str], tests: list[str]) -> None:
    """``tests`` in the environment ``name``, made with ``requirements``: all pass, none skipped."""
    venv = environment(name, requirements)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if IN_CI:
        env["CI"] = "true"
    run = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"{name}: {summary}")
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and "skipped" not in summary, summary
