"""What is ours leaves the process when a conversation ends, and when the process ends however it ends.

A deployed agent's job process ends with ``os._exit`` after multiprocessing's finalizers (LiveKit's
forkserver children, any multiprocessing child): no ``atexit``. Here a real LiveKit session runs in
such a child, exporting to a real collector (rotel) with a 60 s batch delay, so that only a flush
can deliver: its handoffs and LiveKit's ``agent_session`` must arrive while the process still lives
(the session closed), and what ended after that must arrive when the process ends.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from receivers import Rotel, phase_names, wait_until
from support import RECORD_EXIT_WAITS, assert_exit_bounded

from otel_handoff.core import delivery
from otel_handoff.core import schema as sc

TESTS = Path(__file__).resolve().parent

JOB_APP = """
import asyncio, multiprocessing, sys
sys.path.insert(0, {tests!r})


def job(handoffs, release, crash):
    # a job as a worker runs it: export set up in the job, a session, its end; then os._exit
    import otel_handoff
    otel_handoff.configure(service_name="job-" + multiprocessing.get_start_method())
    from livekit.agents import AgentSession
    from lk_agents import Billing, Support
    from opentelemetry import trace
    from otel_handoff.cli.offline.livekit import ScriptedLLM

    async def call():
        session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Billing())
        for n in range(handoffs):
            agent = Support() if n % 2 == 0 else Billing()
            session.update_agent(agent)
            await asyncio.wait_for(agent.entered.wait(), 10)
        if crash:
            raise RuntimeError("the job crashed mid-call")
        await session.aclose()
        print("closed", flush=True)
        await asyncio.to_thread(release.wait)
        trace.get_tracer("job-app").start_span("after-the-call").end()  # only the exit can send it

    asyncio.run(call())
    if "EXITING" in globals():  # support.RECORD_EXIT_WAITS, prefixed: the job's exit begins
        EXITING.append(1)


if __name__ == "__main__":
    method, handoffs, crash = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "crash"
    context = multiprocessing.get_context(method)
    release = context.Event()
    process = context.Process(target=job, args=(handoffs, release, crash), name="job_proc")
    process.start()
    sys.stdin.readline()
    release.set()
    process.join()
    print("exitcode", process.exitcode, flush=True)
"""


def _job(
    tmp_path: Path, endpoint: str, method: str, handoffs: int, crash: bool = False, **settings: str
) -> Any:
    app = tmp_path / "job_app.py"
    app.write_text(RECORD_EXIT_WAITS + textwrap.dedent(JOB_APP.format(tests=str(TESTS))), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",  # no timer delivers within the test: only a flush
        **settings,
    }
    return subprocess.Popen(
        [sys.executable, str(app), method, str(handoffs), "crash" if crash else "call"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _named(rotel: Rotel, name: str) -> list[dict[str, Any]]:
    return [s for s in rotel.spans() if s["name"] == name]


@pytest.mark.parametrize("method", ["forkserver", "spawn", "fork"])
def test_a_job_process_delivers_at_the_call_end_and_at_its_os_exit(
    rotel: Rotel, tmp_path: Path, method: str
) -> None:
    job = _job(tmp_path, rotel.grpc_endpoint, method, handoffs=3)
    try:
        assert job.stdout.readline().strip() == "closed", job.stderr.read()[-3000:]
        # the session closed, the process lives on: its handoffs and LiveKit's session span are there
        handoffs = wait_until(
            lambda: (found := _named(rotel, sc.SPAN_HANDOFF)) and len(found) == 3 and found,
            "the call's handoffs, at the call's end",
        )
        wait_until(lambda: _named(rotel, "agent_session"), "LiveKit's agent_session, at the call's end")
        assert _named(rotel, "after-the-call") == []
        job.stdin.write("\n")
        job.stdin.flush()
        assert job.stdout.readline().split() == ["exitcode", "0"], job.stderr.read()[-3000:]
    finally:
        job.kill()
        job.wait()
    # ended after the call, sent by the process's end (multiprocessing's finalizers; no atexit ran)
    wait_until(lambda: _named(rotel, "after-the-call"), "the span that ended after the call, at os._exit")
    trace_ids = {s["trace_id"] for s in _named(rotel, "agent_session")}
    assert {h["trace_id"] for h in handoffs} <= trace_ids  # in LiveKit's own trace
    spans = rotel.spans()
    phases = set().union(*(phase_names(spans, handoff) for handoff in handoffs))
    assert {sc.SPAN_DRAIN, sc.SPAN_CLOSE, sc.SPAN_START, sc.SPAN_ON_ENTER} <= phases


def test_a_crashed_job_delivers_its_handoffs_at_its_end(rotel: Rotel, tmp_path: Path) -> None:
    job = _job(tmp_path, rotel.grpc_endpoint, "forkserver", handoffs=2, crash=True)
    try:
        job.stdin.write("\n")
        job.stdin.flush()
        assert job.stdout.readline().split() == ["exitcode", "1"], job.stderr.read()[-3000:]
    finally:
        job.kill()
        job.wait()
    wait_until(
        lambda: len(_named(rotel, sc.SPAN_HANDOFF)) == 2 or None, "a crashed job's handoffs, at its end"
    )


def test_a_job_exit_with_a_dead_collector_is_bounded(tmp_path: Path) -> None:
    """A collector that accepts and never answers costs the job's exit 1.5 s of waiting at most,
    not the exporter's 10 s timeout and retries: read off the exit's own waits (each with a
    timeout, 1.5 s in all), not a clock a loaded machine moves."""
    with socket.socket() as listener:  # bound and listening, never accepting: nobody answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        job = _job(tmp_path, f"http://127.0.0.1:{listener.getsockname()[1]}", "forkserver", handoffs=1)
        try:
            out, err = job.communicate("\n", timeout=120)
        finally:
            job.kill()
    assert "exitcode 0" in out, err[-3000:]
    # the flush at the call's end waits on a thread of its own; the exit's waits are bounded
    assert_exit_bounded(err)


# --- the flush never runs on the caller's thread --------------------------------------------------
class _BlockingProvider:
    """A provider whose flush blocks until released: what a collector that never answers does."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.flushes = 0
        self.threads: list[str] = []

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.threads.append(threading.current_thread().name)
        self.release.wait()
        self.flushes += 1
        return True


async def test_a_conversation_end_never_blocks_the_event_loop() -> None:
    from opentelemetry import trace

    provider = _BlockingProvider()
    tracer = trace.NoOpTracer()
    delivery.remember(tracer, provider)
    delivery.conversation_ended(tracer)  # returns at once though the flush blocks
    delivery.conversation_ended(tracer)  # taken by the running flush's next round, no second thread
    await asyncio.sleep(0)  # the loop runs on
    assert not delivery.flush_pending(0)
    provider.release.set()
    assert delivery.flush_pending(10)
    assert provider.threads and set(provider.threads) == {"otel-handoff-flush"}
    assert provider.flushes in (1, 2)


# --- every framework: its conversation's end sends what is ours -------------------------------------
SCRIPTS = TESTS / "scripts"
APPS = {  # an unmodified app of each framework, whose conversation ends before the process does
    "livekit": "offline_agent.py",
    "ag2": "offline_ag2_workflow.py",
    "pipecat": "offline_pipecat_flow.py",
    "openai-agents": "offline_openai_agents.py",
    "google-adk": "offline_google_adk.py",
    "langgraph": "offline_langgraph.py",
    "llama-index": "offline_llama_index.py",
    "strands": "offline_strands.py",
    "agent-framework": "offline_agent_framework.py",
}
# the app runs, then the process stays up (a web-server worker, a frozen serverless handler)
HOLD_AFTER = (
    "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__'); "
    "print('conversation over', flush=True); sys.stdin.readline()"
)


@pytest.mark.parametrize("framework", list(APPS))
def test_every_framework_sends_its_handoffs_when_the_conversation_ends(rotel: Rotel, framework: str) -> None:
    """With a 60 s batch delay, the handoffs reach the receiver while the process still lives."""
    import environments

    from otel_handoff.core.frameworks import FRAMEWORKS

    span_framework = next(f.span_framework for f in FRAMEWORKS if f.key == framework)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env |= {
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": rotel.grpc_endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "60000",
        "OTEL_SERVICE_NAME": f"held-{framework}",
    }
    app = subprocess.Popen(
        [environments.python_for(framework), "-c", HOLD_AFTER, str(SCRIPTS / APPS[framework])],
        env=env,
        cwd=TESTS,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while "conversation over" not in (line := app.stdout.readline()):
            assert line, app.stderr.read()[-3000:]
        wait_until(
            lambda: [
                s
                for s in _named(rotel, sc.SPAN_HANDOFF)
                if s["attributes"].get(sc.FRAMEWORK) == span_framework
            ],
            f"{framework}'s handoff while the process lives",
        )
        app.stdin.write("\n")
        app.stdin.flush()
        assert app.wait(60) == 0, app.stderr.read()[-3000:]
    finally:
        app.kill()
        app.wait()


# --- a good guest: what the exit machinery leaves in the app's process ------------------------------
FORK_GENERATIONS = """
import multiprocessing, sys, threading
from multiprocessing import util
from otel_handoff.core import delivery
from opentelemetry import trace

def registered():
    finalizers = sum(1 for f in util._finalizer_registry.values() if f._callback is delivery._run_exits)
    after_fork = sum(1 for obj in list(util._afterfork_registry.values()) if obj is delivery._after_fork)
    threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("otel-handoff"))
    return finalizers, after_fork, threads

def generation(depth, queue):
    queue.put((depth, *registered()))
    if depth < 4:
        child = multiprocessing.get_context("fork").Process(target=generation, args=(depth + 1, queue))
        child.start()
        child.join()

if __name__ == "__main__":
    delivery.remember(trace.get_tracer("t"), None)
    queue = multiprocessing.get_context("fork").SimpleQueue()
    print(0, *registered(), flush=True)
    generation_0 = multiprocessing.get_context("fork").Process(target=generation, args=(1, queue))
    generation_0.start()
    generation_0.join()
    for _ in range(4):
        print(*queue.get(), flush=True)
"""


def test_the_exit_is_registered_once_in_every_fork_generation(tmp_path: Path) -> None:
    """One finalizer, one after-fork callback and our three threads, at fork depths 0 to 4 (the
    callback had registered itself again in each child: 2, 4, 8, 16 finalizers)."""
    app = tmp_path / "forks.py"
    app.write_text(FORK_GENERATIONS, encoding="utf-8")
    done = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 5, done.stdout
    threads = "['otel-handoff-exit', 'otel-handoff-flush', 'otel-handoff-stop']"
    for depth, line in enumerate(lines):
        assert line == f"{depth} 1 1 {threads}", done.stdout


UVICORN_WRAP = """
import uvicorn.server
from opentelemetry import trace
from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor
import agents  # noqa: F401  (the framework imported: the instrumentor wraps now)

def wrapped():
    return hasattr(uvicorn.server.Server.shutdown, "__wrapped__")

print("before", wrapped())
instrumentor = OpenAIAgentsHandoffInstrumentor()
instrumentor.instrument(tracer_provider=trace.NoOpTracerProvider())
print("instrumented", wrapped())
instrumentor.uninstrument()
print("uninstrumented", wrapped())
instrumentor.instrument(tracer_provider=trace.NoOpTracerProvider())
print("again", wrapped())
instrumentor.uninstrument()
print("again uninstrumented", wrapped())
"""


def test_uvicorn_is_wrapped_only_while_instrumented(tmp_path: Path) -> None:
    app = tmp_path / "uvicorn_wrap.py"
    app.write_text(UVICORN_WRAP, encoding="utf-8")
    done = subprocess.run([sys.executable, str(app)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "before False",
        "instrumented True",
        "uninstrumented False",
        "again True",
        "again uninstrumented False",
    ]


def test_the_flush_count_is_exact_under_concurrent_conversation_ends() -> None:
    """Every ask is counted (askers run on any thread), so a wait covers every flush asked."""
    from opentelemetry import trace

    provider = _BlockingProvider()
    provider.release.set()
    tracer = trace.NoOpTracer()
    delivery.remember(tracer, provider)
    flusher = delivery._flusher
    before = flusher.asked
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave as often as the interpreter lets them
    try:
        threads = [
            threading.Thread(target=lambda: [flusher.ask(tracer, urgent=True) for _ in range(5000)])
            for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert flusher.asked - before == 8 * 5000
    assert delivery.flush_pending(30)
    assert flusher.done == flusher.asked
