"""One deployment of ``agent.py`` as users run it, its calls, and what reached Jaeger after each.

:func:`deploy` starts the worker (``python agent.py start``, auto-instrumented, exporting OTLP to
the namespace's Jaeger) and waits for its registration; :class:`Caller` makes calls through
``caller.py``; after each call :func:`deploy` waits, with a deadline, for the call's handoff
spans to arrive; at the end it stops the worker with SIGTERM as a deployment does and reads
every call's trace once more through ``/api/traces/<id>`` (per-span Jaeger warnings included).
Nothing fails here: what happened is recorded in a :class:`Deployment` for the tests to judge.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import netns
import pytest
import stack
from receivers import Span, wait_until

from otel_handoff.core import schema as sc

HERE = Path(__file__).resolve().parent
AGENT_NAME = "support-line"
SECOND_AGENT = "billing"
ARRIVAL_SECONDS = 5.0  # a call's handoff spans must be in Jaeger this soon after the caller left
READ_BACK_SECONDS = 2.0  # once the worker has exited, what was sent is in Jaeger within moments
CALL_TIMEOUT = 90.0  # one call, however slow the machine: the caller's own steps time out sooner
WORKER_STOP_TIMEOUT = 60.0
HANDOFF = "agent_handoff"
FIRST_SPEECH = "agent_handoff.first_speech"
CONVERSATION_ID = "gen_ai.conversation.id"


def skip_unless_deployable() -> None:
    """Skip the calling test module where ``agent.py`` cannot run: it is written for livekit-agents
    1.8 (AgentServer, turn_handling); the matrix's older releases are tested without a server."""
    agents = pytest.importorskip("livekit.agents")
    session_parameters = inspect.signature(agents.AgentSession).parameters
    if not hasattr(agents, "AgentServer") or "turn_handling" not in session_parameters:
        pytest.skip(
            "the deployed agent is written for livekit-agents 1.8 (AgentServer, turn_handling)",
            allow_module_level=True,
        )


@dataclass(frozen=True)
class Call:
    """What the caller does: says ``speech``, stays ``linger`` seconds after the reply."""

    speech: str
    linger: float = 0.0
    crash: bool = False  # the job's entrypoint fails after the handoff (measure.py)


@dataclass
class CallRecord:
    call: Call
    room: str
    caller: dict[str, Any]  # caller.py's answer
    left_ns: int  # when the caller's answer arrived (it had hung up)
    arrival_s: float | None = None  # seconds from hanging up until its handoff spans were in Jaeger
    job_arrival_s: float | None = None  # ... until its whole job trace was, when the deployment waits
    spans: list[Span] = field(default_factory=list)  # its trace(s), read after the worker stopped
    warnings: dict[str, list[str]] = field(default_factory=dict)  # span id -> Jaeger's warnings

    @property
    def sid(self) -> str | None:
        return self.caller.get("room_sid")

    def measured(self, records: list[dict[str, Any]], event: str, agent: str) -> dict[str, Any] | None:
        """The worker's ``event`` record (measure.py) for ``agent`` in this call's room."""
        mine = (r for r in records if r["event"] == event and r["room"] == self.room)
        return next((r for r in mine if r.get("agent") == agent), None)


@dataclass
class Deployment:
    name: str
    service: str
    workdir: Path
    worker_pid: int
    calls: list[CallRecord] = field(default_factory=list)
    worker_exit: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)  # measure.py's JSON lines
    seconds: float = 0.0
    environment: dict[str, str] = field(default_factory=dict)  # the worker's

    def worker_log(self) -> str:
        return (self.workdir / f"worker-{self.name}.log").read_text(errors="replace")


class Caller:
    """``caller.py`` in the namespace, its stdin and stdout piped: one call per command."""

    def __init__(self, space: netns.Namespace, server: stack.LiveKitServer, workdir: Path) -> None:
        command = [
            *("nsenter", "-t", str(space.holder.pid), "--net", "--mount", f"--wd={workdir}"),
            *(sys.executable, str(HERE / "caller.py")),
            *(server.url, server.api_key, server.api_secret, AGENT_NAME, str(workdir)),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LIVEKIT_"))}
        self.peer = stack.JsonLinePeer(space, command, workdir / "caller.log", env, "the caller to start")

    def call(self, room: str, call: Call) -> dict[str, Any]:
        command = {"room": room, "speech": call.speech, "linger": call.linger}
        return self.peer.ask(command, f"call {room}", CALL_TIMEOUT)

    def close(self) -> None:
        self.peer.close()


# --- Jaeger ---------------------------------------------------------------------------------------
def traces(jaeger: stack.Jaeger, service: str) -> list[dict[str, Any]]:
    """Every trace of ``service``, raw (``/api/traces``): spans with their ``warnings``."""
    answer = jaeger.get("/api/traces", service=service, limit=1000)
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]


def trace(jaeger: stack.Jaeger, trace_id: str) -> dict[str, Any]:
    """One trace, raw, through ``/api/traces/<id>``."""
    answer = jaeger.get(f"/api/traces/{trace_id}")
    assert not answer.get("errors"), answer["errors"]
    (found,) = answer["data"]
    return found


def handoff_of(spans: Sequence[Span], sid: str | None) -> Span | None:
    """The call's handoff: the ``agent_handoff`` span carrying its room's conversation id."""
    return next(
        (s for s in spans if s["name"] == HANDOFF and s["attributes"].get(CONVERSATION_ID) == sid), None
    )


def first_speech_of(spans: Sequence[Span], handoff: Span) -> Span | None:
    return next((s for s in spans if s["name"] == FIRST_SPEECH and handoff["span_id"] in s["links"]), None)


def phases_of(spans: Sequence[Span], handoff: Span) -> list[Span]:
    """The handoff's phases, in start order: its phase child spans, and for each phase LiveKit's own
    span stood for (1.8.2+: under its ``update_agent``, not sent by us), a stand-in of its
    seconds on the handoff, ending where LiveKit's span ends (``stood_for``: its own span's name)."""
    children = [s for s in spans if s["parent_id"] == handoff["span_id"]]
    found = [s for s in children if s["name"].startswith(HANDOFF + ".")]
    theirs: dict[str, Span] = {}
    below = [s for s in children if not s["name"].startswith(HANDOFF)]
    while below:
        span = below.pop()
        if span["name"] not in theirs or span["start_us"] < theirs[span["name"]]["start_us"]:
            theirs[span["name"]] = span
        below += [s for s in spans if s["parent_id"] == span["span_id"]]
    sent = {s["name"] for s in found}
    for spec in sc.PHASE_REGISTRY:
        seconds = handoff["attributes"].get(spec.duration_attribute)
        livekit = theirs.get(spec.framework_span or "")
        if spec.span in sent or seconds is None or livekit is None:
            continue
        length = round(seconds * 1e6)
        found.append(
            {
                "name": spec.span,
                "span_id": None,
                "parent_id": handoff["span_id"],
                "start_us": livekit["start_us"] + livekit["duration_us"] - length,
                "duration_us": length,
                "attributes": {spec.duration_attribute: seconds},
                "links": [],
                "stood_for": livekit["name"],
            }
        )
    return sorted(found, key=lambda s: s["start_us"])


def call_spans(all_traces: list[dict[str, Any]], sid: str | None) -> list[Span]:
    """The spans of every trace that holds the call's handoff or a span of its room."""
    found: list[Span] = []
    for raw in all_traces:
        spans = [stack.jaeger_span(s) for s in raw["spans"]]
        if any(
            s["attributes"].get(CONVERSATION_ID) == sid or s["attributes"].get("lk.room_sid") == sid
            for s in spans
        ):
            found.extend(spans)
    return found


def delivered(spans: Sequence[Span], sid: str | None) -> bool:
    """The call's handoff, at least one of its phases and its linked first speech are in."""
    handoff = handoff_of(spans, sid)
    return (
        handoff is not None
        and bool(phases_of(spans, handoff))
        and first_speech_of(spans, handoff) is not None
    )


def arrived_within(check: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``check()`` held, polling; None if it did not within ``timeout``."""
    started = time.monotonic()
    with contextlib.suppress(AssertionError):
        wait_until(check, "arrival", timeout=timeout, every=0.1)
        return time.monotonic() - started
    return None


# --- the deployment -------------------------------------------------------------------------------
def worker_environment(
    service: str, measurements: Path, server: stack.LiveKitServer, *, auto: bool = True, **extra: str
) -> dict[str, str]:
    """The deployment's environment: the user's variables only, no OTEL_* of the test run's;
    ``auto``: tracing comes from ``OTEL_HANDOFF_AUTO_INSTRUMENT``, not from the agent file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LIVEKIT_"))}
    if auto:
        env["OTEL_HANDOFF_AUTO_INSTRUMENT"] = "true"
    env.update(
        LIVEKIT_URL=server.url,
        LIVEKIT_API_KEY=server.api_key,
        LIVEKIT_API_SECRET=server.api_secret,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://jaeger:4317",
        OTEL_SERVICE_NAME=service,
        LIVEKIT_CALL_MEASUREMENTS=str(measurements),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def configured_agent(workdir: Path) -> Path:
    """``agent.py`` as a user who sets tracing up in the file has it: ``import otel_handoff`` with
    its imports and ``otel_handoff.configure()`` after them, at module level (so in every job
    process that imports it), in a folder of its own beside the modules it imports."""
    folder = workdir / "configured-agent"
    folder.mkdir(exist_ok=True)
    for name in ("scripted.py", "timeline.py", "tones.py", "measure.py"):
        shutil.copy(HERE / name, folder / name)
    source = (HERE / "agent.py").read_text()
    after_imports = "\nMAX_CONCURRENT_CALLS"
    assert "\nimport os\n" in source and after_imports in source
    source = source.replace("\nimport os\n", "\nimport os\n\nimport otel_handoff\n", 1)
    source = source.replace(after_imports, "\notel_handoff.configure()\n" + after_imports, 1)
    (folder / "agent.py").write_text(source)
    return folder / "agent.py"


@contextlib.contextmanager
def worker(
    space: netns.Namespace, name: str, env: dict[str, str], agent: Path = HERE / "agent.py"
) -> Iterator[subprocess.Popen[bytes]]:
    """``python agent.py start`` in the namespace, registered with the server; stopped after."""
    log = space.workdir / f"worker-{name}.log"
    process = space.start([sys.executable, str(agent), "start"], log, env)
    try:
        wait_until(
            lambda: process.poll() is not None or "registered worker" in log.read_text(errors="replace"),
            f"the {name} worker to register",
            timeout=60,
            every=0.1,
        )
        assert process.poll() is None, f"the worker exited: {stack._tail(log)}"
        yield process
    finally:
        netns.stop(process, timeout=WORKER_STOP_TIMEOUT)


def deploy(
    space: netns.Namespace,
    jaeger: stack.Jaeger,
    server: stack.LiveKitServer,
    name: str,
    calls: Sequence[Call],
    *,
    configure_in_file: bool = False,
    **env: str,
) -> Deployment:
    """Run ``calls`` one after another against a fresh worker, then SIGTERM it; record it all.
    ``configure_in_file``: the agent file calls ``otel_handoff.configure()`` (no auto variable),
    and after each call the deployment waits for the call's whole job trace too."""
    started = time.monotonic()
    service = f"support-line-{name}"
    measurements = space.workdir / f"measure-{name}.jsonl"
    caller = Caller(space, server, space.workdir)
    agent = configured_agent(space.workdir) if configure_in_file else HERE / "agent.py"
    environment = worker_environment(service, measurements, server, auto=not configure_in_file, **env)
    try:
        with worker(space, name, environment, agent) as process:
            deployment = Deployment(name, service, space.workdir, process.pid, environment=environment)
            for number, call in enumerate(calls, 1):
                room = f"{'crash-' if call.crash else ''}{name}-{number}"
                answer = caller.call(room, call)
                record = CallRecord(call, room, answer, time.time_ns())
                deployment.calls.append(record)
                # before the next call: this one's spans, within seconds of the caller hanging up
                record.arrival_s = arrived_within(
                    lambda sid=record.sid: delivered(call_spans(traces(jaeger, service), sid), sid),
                    ARRIVAL_SECONDS,
                )
                if configure_in_file:  # the job process ends after the call: its root, flushed then
                    record.job_arrival_s = arrived_within(
                        lambda sid=record.sid: _complete(call_spans(traces(jaeger, service), sid)),
                        ARRIVAL_SECONDS,
                    )
            os.kill(process.pid, signal.SIGTERM)  # as a deployment stops it
            with contextlib.suppress(subprocess.TimeoutExpired):
                deployment.worker_exit = process.wait(WORKER_STOP_TIMEOUT)
    finally:
        caller.close()
    _read_back(jaeger, deployment)
    if measurements.exists():
        deployment.records = [json.loads(line) for line in measurements.read_text().splitlines()]
    deployment.seconds = time.monotonic() - started
    return deployment


def _read_back(jaeger: stack.Jaeger, deployment: Deployment) -> None:
    """After the worker exited: each call's trace(s) through ``/api/traces/<id>``, once everything
    expected is in or the deadline passed (no process is left to send anything later)."""

    def complete() -> bool:
        everything = traces(jaeger, deployment.service)
        return all(_complete(call_spans(everything, call.sid)) for call in deployment.calls)

    arrived_within(complete, READ_BACK_SECONDS)
    everything = traces(jaeger, deployment.service)
    (deployment.workdir / f"traces-{deployment.name}.json").write_text(json.dumps(everything))
    for call in deployment.calls:
        ids = {s["trace_id"] for s in call_spans(everything, call.sid)}
        for trace_id in sorted(ids):
            raw = trace(jaeger, trace_id)
            call.spans.extend(stack.jaeger_span(s) for s in raw["spans"])
            call.warnings.update({s["spanID"]: s["warnings"] for s in raw["spans"] if s.get("warnings")})


EXPECTED_IN_JOB_TRACE = ("job_entrypoint", "agent_session", HANDOFF, FIRST_SPEECH)


def _complete(spans: Sequence[Span]) -> bool:
    names = {s["name"] for s in spans}
    return all(name in names for name in EXPECTED_IN_JOB_TRACE)
