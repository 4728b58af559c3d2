"""Each framework installed without its sources (compiled with ``compileall``, the ``.py`` files
removed, as a frozen or size-trimmed deployment ships it): ``instrument()`` never raises into the
app. Our feature checks read code objects, not source, so every framework is instrumented there
and its demo's handoffs are traced; were a check to fail anyway, one line would refuse it.

Each framework's own top package(s) are copied to a temporary folder, compiled beside
(``compileall -b``: ``x.pyc`` next to where ``x.py`` was) and put first on ``sys.path`` of a
process of their own, in the framework's environment (``tests/environments.py``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from environments import ROOT, python_for
from opentelemetry.sdk.trace import TracerProvider

from otel_handoff.core.frameworks import FRAMEWORKS

# framework key -> its own top packages, as folders of site-packages (a namespace package's portion
# where the top is a namespace: livekit, google, llama_index)
PACKAGES = {
    "livekit": ("livekit/agents",),
    "ag2": ("autogen", "ag2"),
    "pipecat": ("pipecat",),
    "openai-agents": ("agents",),
    "google-adk": ("google/adk",),
    "langgraph": ("langgraph",),
    "llama-index": ("llama_index/core",),
    "strands": ("strands",),
    "agent-framework": ("agent_framework", "agent_framework_orchestrations"),
}

# run in the framework's Python, with the sourceless copy first on sys.path
SCRIPT = r"""
import asyncio, importlib, inspect, json, logging, sys

sys.path.insert(0, sys.argv[1])
key, modules = sys.argv[2], sys.argv[3:]
records = []


class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)


logging.getLogger().addHandler(Keep(logging.WARNING))
for name in modules:
    module = importlib.import_module(name)
    assert module.__file__.startswith(sys.argv[1]) and module.__file__.endswith(".pyc"), module.__file__
    try:
        inspect.getsource(module)
        raise AssertionError(f"{name} has its source")
    except OSError:
        pass  # as on a sourceless install

from opentelemetry.sdk.trace import TracerProvider
from otel_handoff.cli import _DEMOS
from otel_handoff.core.frameworks import BY_KEY

framework = BY_KEY[key]
module_name, _, class_name = framework.instrumentor.partition(":")
instrumentor = getattr(importlib.import_module(module_name), class_name)()
instrumentor.instrument(tracer_provider=TracerProvider())
instrumented = type(instrumentor)._in_place()
lines = [r.getMessage() for r in records if r.name.startswith("otel_handoff")]
handoffs = None
if instrumented:  # its demo, instrumented as the demo does it: the handoffs are traced
    instrumentor.uninstrument()
    demo_module, function, _ = _DEMOS[key]
    run = getattr(importlib.import_module(f"otel_handoff.cli.{demo_module}"), function)
    result = asyncio.run(run())
    handoffs = sum(span.name == "agent_handoff" for span in result.spans)
    result.shutdown()
print(json.dumps({"instrumented": instrumented, "lines": lines, "handoffs": handoffs}))
"""


def _site_packages(python: str) -> Path:
    found = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(found.stdout.strip())


def test_every_framework_is_listed() -> None:
    assert set(PACKAGES) == {framework.key for framework in FRAMEWORKS}


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.key)
def test_a_sourceless_install_is_instrumented_and_never_raises(framework, tmp_path: Path) -> None:
    python = python_for(framework.key)
    site = _site_packages(python)
    for package in PACKAGES[framework.key]:
        if not (site / package).is_dir():
            pytest.skip(f"{framework.key}: {package} is not installed in {python}")
        shutil.copytree(site / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    compiled = subprocess.run(
        [python, "-m", "compileall", "-q", "-b", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert compiled.returncode == 0, compiled.stdout[-2000:] + compiled.stderr[-2000:]
    for source in tmp_path.rglob("*.py"):
        source.unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env["PYTHONPATH"] = str(ROOT)  # this checkout's otel_handoff, after the sourceless copy
    modules = list(framework.modules)
    run = subprocess.run(
        [python, "-c", SCRIPT, str(tmp_path), framework.key, *modules],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "Traceback" not in run.stderr, run.stderr[-5000:]
    outcome = json.loads(run.stdout.strip().splitlines()[-1])
    # instrumented, with nothing to say, and its demo's handoffs traced
    assert outcome["instrumented"] and outcome["lines"] == [] and outcome["handoffs"], outcome


@pytest.mark.parametrize("step", ["detect", "missing", "wrap_points"])
def test_a_check_that_fails_in_any_way_refuses_in_one_line(
    step: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever a release's checks raise (here OSError, as inspect.getsource does without
    sources), instrument() returns, one line says why and what to do, and nothing is patched."""
    pytest.importorskip("llama_index.core.agent.workflow")
    from otel_handoff.llama_index import LlamaIndexHandoffInstrumentor

    def fails(*args: object) -> None:
        raise OSError("could not get source code")

    monkeypatch.setattr(LlamaIndexHandoffInstrumentor, step, fails)
    instrumentor = LlamaIndexHandoffInstrumentor()
    with caplog.at_level(logging.INFO, logger="otel_handoff"):
        instrumentor.instrument(tracer_provider=TracerProvider())
    try:
        assert not LlamaIndexHandoffInstrumentor._in_place()
        (line,) = [r.getMessage() for r in caplog.records if r.name.startswith("otel_handoff")]
        assert (
            "llama-index-core" in line and "could not be checked (OSError: could not get source code)" in line
        )
        assert "not traced. Install a tested release" in line and "\n" not in line
    finally:
        instrumentor.uninstrument()


SHAPES = """
class Hub:
    async def _fan_out(self, method_name, *args):
        own = getattr(self, method_name, None)
        for listener in args:
            getattr(listener, method_name, None)


async def handoff(ctx, to_agent):
    agents = await ctx.store.get("agents")
    return f"Agent {to_agent}: agent handoff after a progress update is not supported"


class Workflow:
    def __init__(self):
        self._runner = [n for n in range(3)]
"""


def test_the_shape_checks_read_code_without_its_source() -> None:
    """core/shapes.py on code compiled from a string: no source for inspect to find."""
    import inspect

    from otel_handoff.core.shapes import code_names, holds_text, loads_in_sequence

    found: dict[str, object] = {}
    exec(compile(SHAPES, "<no source>", "exec"), found)
    hub, handoff, workflow = found["Hub"], found["handoff"], found["Workflow"]
    with pytest.raises(OSError):
        inspect.getsource(handoff)
    assert loads_in_sequence(hub._fan_out, "getattr", "self", "method_name")
    assert not loads_in_sequence(hub._fan_out, "getattr", "method_name", "self")
    assert loads_in_sequence(handoff, "ctx", "store") and not loads_in_sequence(handoff, "store", "ctx")
    assert holds_text(handoff, "progress update is not supported")  # an f-string's literal part
    assert "_runner" in code_names(workflow.__init__) and "range" in code_names(workflow.__init__)
    assert code_names(len) == frozenset() and not loads_in_sequence(None, "x")
