"""Environments of their own, for frameworks that cannot share the suite's.

google-adk caps opentelemetry-sdk (2.13: <= 1.44) below what livekit-agents 1.8 needs (1.45), so
no single environment holds both. The suite makes ``.venv-google-adk`` beside ``.venv-test`` (once;
again when pyproject.toml or the requirements here change), with everything ADK's tests use,
resolved in one pip call so the pins hold. strands-agents holds opentelemetry below the suite's
(``STRANDS_REQUIREMENTS``): ``.venv-strands`` likewise. agent-framework-a2a has only pre-releases
(``AGENT_FRAMEWORK_A2A_REQUIREMENTS``): ``.venv-agent-framework-a2a``, whose Python runs the
processes of ``tests/test_agent_framework_a2a.py``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROTEL_VERSION = re.search(r'ROTEL_VERSION="([^"]+)"', (ROOT / ".ci" / "install-receivers.sh").read_text())
ADK_REQUIREMENTS = [
    "-e",
    ".[google-adk]",
    "opentelemetry-distro",  # what opentelemetry-instrument users install
    "openinference-instrumentation-google-adk",  # ours beside theirs
    "a2a-sdk[http-server]",  # a transfer to a remote agent (RemoteA2aAgent, to_a2a): google-adk[a2a]
    f"rotel=={ROTEL_VERSION.group(1) if ROTEL_VERSION else ''}",
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "hypothesis>=6",
    "pyyaml>=6",
]


def environment(name: str, requirements: list[str], python: str = sys.executable) -> Path:
    """``ROOT/name``, an environment of ``python`` with ``requirements``, made unless already made so."""
    venv = ROOT / name
    stamp = hashlib.sha256(
        "\n".join([python, *requirements, (ROOT / "pyproject.toml").read_text()]).encode()
    ).hexdigest()
    marker = venv / "otel-handoff-requirements.sha256"
    if marker.exists() and marker.read_text() == stamp:
        return venv
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
    # the project and its framework first (seconds); then the rest held to the opentelemetry
    # releases that chose (pip alone backtracks through every opentelemetry-distro: minutes)
    _install(venv, requirements[:2])
    frozen = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    constraints = venv / "otel-handoff-constraints.txt"
    constraints.write_text(
        "".join(f"{line}\n" for line in frozen.splitlines() if line.startswith("opentelemetry-"))
    )
    _install(venv, ["-c", str(constraints), *requirements[2:]])
    marker.write_text(stamp)
    return venv


def _install(venv: Path, requirements: list[str]) -> None:
    """uv (the test extra's) where it is: seconds, where pip takes a minute or more an environment
    (seven of them in CI); pip when uv is absent or cannot, with both answers kept for the failure."""
    uv = shutil.which("uv") or (Path(sys.executable).parent / "uv")
    answers = ""
    if Path(uv).exists():
        command = [str(uv), "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")]
        done = subprocess.run(
            [*command, *requirements], cwd=ROOT, capture_output=True, text=True, timeout=1800
        )
        if done.returncode == 0:
            return
        answers = f"uv: {done.stderr[-2000:]}\n"
    pip = [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*pip, *requirements], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, answers + done.stdout[-2000:] + done.stderr[-3000:]


# strands-agents needs opentelemetry-instrumentation-threading, whose newest release (0.66b1) holds
# opentelemetry-api and -sdk at 1.45.1, below the suite's: pip would move them down
STRANDS_REQUIREMENTS = [
    "-e",
    ".[strands]",
    "opentelemetry-distro",  # what opentelemetry-instrument users install
    "strands-agents[a2a]",  # A2AAgent and A2AServer: a delegation over A2A joins the trace
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "hypothesis>=6",
    "pyyaml>=6",
]

# agent-framework-a2a (A2AAgent, A2AExecutor) has only pre-releases: pinned, beside the suite's
# agent-framework-core and -orchestrations, in an environment of its own (.venv-test takes no betas)
AGENT_FRAMEWORK_A2A_REQUIREMENTS = [
    "-e",
    ".[agent-framework]",
    "agent-framework-a2a==1.0.0b261022",  # a delegation over A2A joins the trace
    "a2a-sdk[http-server]",  # the served side: A2AExecutor under a2a-sdk's Starlette routes
    "uvicorn>=0.30",
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "hypothesis>=6",
    "pyyaml>=6",
]

# framework key -> (its environment's folder, what it holds)
OWN_ENVIRONMENTS = {
    "google-adk": (".venv-google-adk", ADK_REQUIREMENTS),
    "strands": (".venv-strands", STRANDS_REQUIREMENTS),
}


def python_for(framework: str) -> str:
    """The Python that has ``framework``: this one, or its own environment's (made if need be)."""
    from otel_handoff.core.frameworks import BY_KEY

    module = BY_KEY[framework].demo_module
    try:
        importable = importlib.util.find_spec(module) is not None
    except ImportError:
        importable = False
    if importable or framework not in OWN_ENVIRONMENTS:
        return sys.executable
    name, requirements = OWN_ENVIRONMENTS[framework]
    return str(environment(name, requirements) / "bin" / "python")


# every CPython from 3.10 a user may run: the exit and delivery tests run on each (tests/test_every_python.py)
OLDEST_PYTHON = (3, 10)
PYTHONS_EXPECTED = ("3.10", "3.11", "3.12", "3.13")  # what our machines carry; 3.14 too where present
EVERY_PYTHON_REQUIREMENTS = ["-e", ".[openai-agents]", "opentelemetry-distro", "uvicorn>=0.30"]


def pythons() -> dict[str, str]:
    """minor version ("3.12") -> the newest pyenv interpreter of it, from 3.10 on (this one's
    minor: this interpreter, when pyenv has none)."""
    import os

    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = {"{}.{}".format(*sys.version_info[:2]): sys.executable}
    releases = [p for p in root.glob("3.*") if re.fullmatch(r"3\.\d+\.\d+", p.name)]  # no dev builds
    for release in sorted(releases, key=lambda p: tuple(map(int, p.name.split(".")))):  # newest last
        minor = release.name.rsplit(".", 1)[0]
        interpreter = release / "bin" / f"python{minor}"
        if tuple(map(int, minor.split("."))) >= OLDEST_PYTHON and interpreter.exists():
            found[minor] = str(interpreter)
    return dict(sorted(found.items(), key=lambda item: tuple(map(int, item[0].split(".")))))
