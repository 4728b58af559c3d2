"""A worker handoff across two processes on a RedisBus: a real redis-server (Debian's, from
``.ci/install-receivers.sh``), triage and billing in processes of their own, each traced by
``OTEL_HANDOFF_AUTO_INSTRUMENT=true`` alone (``tests/pipecat_workers/app.py`` has no tracing code).

One scenario, run once for the module (about 15 s: most of it Pipecat's drain waiting out its flush).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pipecat.bus.network.redis", reason="needs pipecat-ai[redis] (redis-py)")

from pipecat.pipeline.worker import PipelineWorker

from otel_handoff.cli.span_sources import SpanRecord, read_spans
from otel_handoff.cli.summary import collect_handoffs
from otel_handoff.core import schema as sc

APP = Path(__file__).parent / "pipecat_workers" / "app.py"
ROOT = Path(__file__).resolve().parents[1]
# linked into the test venv by .ci/install-receivers.sh; else where it unpacks it (a matrix cell's venv)
REDIS = (
    shutil.which("redis-server", path=str(Path(sys.executable).parent))
    or shutil.which(
        "redis-server", path=os.environ.get("REDIS_DIR", str(Path.home() / ".cache/otel-handoff/redis"))
    )
    or shutil.which("redis-server")
)
STARTUP_TIMEOUT = 30.0
RUN_TIMEOUT = 120.0
DRAINS = "activate_worker" in vars(PipelineWorker)  # PipelineWorker drains before it hands over (1.8+)


@dataclass
class Crossing:
    front: list[SpanRecord]  # the process that asked (session and triage)
    billing: list[SpanRecord]  # the process that took it
    front_output: str
    front_errors: str
    billing_output: str


def _wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} never came up")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def crossing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crossing]:
    if REDIS is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is missing: run .ci/install-receivers.sh")
        pytest.skip("redis-server is not installed (.ci/install-receivers.sh)")
    folder = tmp_path_factory.mktemp("redis")
    socket = folder / "redis.sock"
    # a Unix socket and no TCP port at all (--port 0): nothing to guess, nothing to collide with
    server = subprocess.Popen(
        [REDIS, "--port", "0", "--unixsocket", str(socket), "--save", "", "--appendonly", "no"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_TRACES_EXPORTER": "otel_handoff_file",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    try:
        _wait_for(socket, "redis-server")
        channel = f"pipecat:{folder.name}"
        billing_file, front_file = folder / "billing.jsonl", folder / "front.jsonl"
        billing = subprocess.Popen(
            [sys.executable, str(APP), "billing", str(socket), channel],
            env={**env, "OTEL_HANDOFF_EXPORT_FILE": str(billing_file)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:  # started together: triage waits until the runners have swapped registries
            front = subprocess.run(
                [sys.executable, str(APP), "front", str(socket), channel],
                env={**env, "OTEL_HANDOFF_EXPORT_FILE": str(front_file)},
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT,
            )
            assert front.returncode == 0, front.stderr[-3000:]
            billing.wait(RUN_TIMEOUT)  # the app's end message ends billing's runner too
            billing_output, billing_errors = billing.communicate()
            assert billing.returncode == 0, billing_errors[-3000:]
        finally:
            if billing.poll() is None:
                billing.kill()
                billing.wait()
        yield Crossing(
            read_spans(str(front_file)),
            read_spans(str(billing_file)),
            front.stdout,
            front.stderr,
            billing_output,
        )
    finally:
        server.terminate()
        server.wait(10)


def test_one_trace_one_handoff_the_receiving_side_under_the_asking_side(crossing: Crossing) -> None:
    assert "billing answered" in crossing.front_output and "billing ready" in crossing.billing_output
    spans = crossing.front + crossing.billing
    handoffs = [s for s in spans if s.name == sc.SPAN_HANDOFF]
    assert len(handoffs) == 1  # exactly one, though two processes saw it
    (handoff,) = handoffs
    assert handoff in crossing.billing  # the process that saw it end made it
    assert (handoff.attributes[sc.FROM_AGENT_NAME], handoff.attributes[sc.TO_AGENT_NAME]) == (
        "triage",
        "billing",
    )
    # under the asking process's conversation: one trace across both
    (root,) = [s for s in crossing.front if s.name == sc.SPAN_CHAT]
    assert handoff.trace_id == root.trace_id and handoff.parent_id == root.span_id
    assert {s.trace_id for s in spans if s.name.startswith("agent_handoff")} == {root.trace_id}
    children = {
        s.name.removeprefix("agent_handoff."): s for s in crossing.billing if s.parent_id == handoff.span_id
    }
    assert list(children) == ["handler", "drain", "bus_crossing", "setup", "first_output"]
    for name, child in children.items():
        print(f"{name:>14} {(child.end_ns - child.start_ns) / 1e6:10.1f} ms")  # with -s: the numbers


@pytest.mark.skipif(not DRAINS, reason="before pipecat-ai 1.8 no drain precedes the handover")
def test_the_drain_shows_pipecats_lost_flush_signal(crossing: Crossing) -> None:
    """Over Redis the flush probe's event does not survive serialisation: the handing-over worker's
    drain waits until its flush gives up (5 s of no progress, after the progress it was told of)."""
    (handoff,) = [s for s in crossing.billing if s.name == sc.SPAN_HANDOFF]
    drain = handoff.attributes[sc.DRAIN_DURATION]
    assert drain >= 5.0
    assert "pipeline flush gave up" in crossing.front_errors
    assert drain > 0.8 * (handoff.end_ns - handoff.start_ns) / 1e9  # where the time went


def test_summary_shows_it_whole(crossing: Crossing) -> None:
    (record,) = collect_handoffs(crossing.front + crossing.billing)
    assert record.framework == sc.FRAMEWORK_PIPECAT_WORKERS
    assert {"handler", "drain", "bus_crossing", "setup", "first_output"} <= set(record.phases)
