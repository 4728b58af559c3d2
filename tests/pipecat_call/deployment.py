"""One deployment of ``bot.py`` as users run it, its calls, and what reached Jaeger after each.

:func:`deploy` starts Pipecat's development runner (``python bot.py -t webrtc``, auto-instrumented,
exporting OTLP to the namespace's Jaeger) and waits until it serves; :class:`Caller` makes calls
through ``caller.py``; after each call :func:`deploy` waits, with a deadline, for the call's
transition to arrive; right after the last call it stops the bot with SIGTERM as a deployment does
and reads every call's trace once more through ``/api/traces/<id>`` (per-span warnings included).
Nothing fails here: what happened is recorded in a :class:`Deployment` for the tests to judge.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import netns
import shaper
import stack
from receivers import Span, wait_until

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
SECOND_NODE = "billing"
PORT = 7860  # the runner's default
ARRIVAL_SECONDS = 5.0  # a call's transition must be in Jaeger this soon after the caller left
READ_BACK_SECONDS = 5.0  # once the bot has exited, what was sent is in Jaeger within moments
CALL_TIMEOUT = 90.0  # one call, however slow the machine: the caller's own steps time out sooner
STOP_TIMEOUT = 60.0
HANDOFF = "agent_handoff"
FIRST_SPEECH = "agent_handoff.first_speech"
CONVERSATION_ID = "gen_ai.conversation.id"
# each call's one trace: the runner's request, Pipecat's conversation and turn, the transition
EXPECTED_IN_TRACE = ("POST /api/offer", "conversation", "turn", HANDOFF, FIRST_SPEECH)
# the bot's and the caller's ends of the shaped link (``shaper.wire``): the caller reaches the
# runner there, and the media goes that way (aiortc gathers no candidates on a loopback)
BOT_ADDRESS, CALLER_ADDRESS = "10.250.0.1", "10.250.0.2"


@dataclass(frozen=True)
class Call:
    """What the caller does: says ``speech``, stays ``linger`` seconds after the reply."""

    speech: str
    linger: float = 0.0


@dataclass
class CallRecord:
    call: Call
    caller: dict[str, Any]  # caller.py's answer
    left: float  # time.monotonic() when the answer arrived (the caller had hung up)
    arrival_s: float | None = None  # seconds from hanging up until its transition was in Jaeger
    spans: list[Span] = field(default_factory=list)  # its trace, read after the bot stopped
    warnings: dict[str, list[str]] = field(default_factory=dict)  # span id -> Jaeger's warnings

    @property
    def id(self) -> str | None:
        """The peer connection's id: the bot's conversation id."""
        return self.caller.get("pc_id")

    def measured(self, records: list[dict[str, Any]], event: str, node: str) -> dict[str, Any] | None:
        """The bot's ``event`` record (measure.py) for ``node`` in this call."""
        mine = (r for r in records if r["event"] == event and r.get("call") == self.id)
        return next((r for r in mine if r.get("agent") == node), None)


@dataclass
class Deployment:
    name: str
    service: str
    workdir: Path
    calls: list[CallRecord] = field(default_factory=list)
    bot_exit: int | None = None
    records: list[dict[str, Any]] = field(default_factory=list)  # measure.py's JSON lines
    seconds: float = 0.0
    requests: list[Span] = field(default_factory=list)  # the runner's own spans (its web requests)
    all_spans: list[Span] = field(default_factory=list)
    link: shaper.Link | None = None  # the link between the bot and the caller
    shaped: list[dict[str, Any]] = field(default_factory=list)  # what the shaper applied (its record)

    def bot_log(self) -> str:
        return (self.workdir / f"bot-{self.name}.log").read_text(errors="replace")


class Caller:
    """``caller.py`` in the caller's namespace, its stdin and stdout piped: one call per command."""

    def __init__(self, space: netns.Namespace, workdir: Path, env: dict[str, str], script: str) -> None:
        # the caller stands for a device of its own: the load on this machine (the bot's, and the
        # test's stress) must not delay when it reads what it hears, so aiortc's runs at a higher
        # priority; Chromium does not (its several processes would starve the bot's audio: seen as
        # the bot's packets leaving 80-130 ms apart, and the browser's buffer growing)
        nice = "-10" if script == "caller.py" else "0"
        command = [
            *("nice", "-n", nice),
            *("nsenter", "-t", str(space.holder.pid), "--net", "--mount", f"--wd={workdir}"),
            *(sys.executable, str(HERE / script), f"http://{BOT_ADDRESS}:{PORT}/api/offer", str(workdir)),
        ]
        self.peer = stack.JsonLinePeer(space, command, workdir / "caller.log", env, "the caller to start")

    def call(self, call: Call) -> dict[str, Any]:
        command = {"speech": call.speech, "linger": call.linger}
        return self.peer.ask(command, "a call", CALL_TIMEOUT)

    def close(self) -> None:
        self.peer.close()


# --- Jaeger ---------------------------------------------------------------------------------------
def traces(jaeger: stack.Jaeger, service: str) -> list[dict[str, Any]]:
    answer = jaeger.get("/api/traces", service=service, limit=1000)
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]


def handoff_of(spans: Sequence[Span], call_id: str | None) -> Span | None:
    """The call's transition: the ``agent_handoff`` span carrying its conversation id."""
    return next(
        (s for s in spans if s["name"] == HANDOFF and s["attributes"].get(CONVERSATION_ID) == call_id), None
    )


def first_speech_of(spans: Sequence[Span], handoff: Span) -> Span | None:
    return next((s for s in spans if s["name"] == FIRST_SPEECH and handoff["span_id"] in s["links"]), None)


def phases_of(spans: Sequence[Span], handoff: Span) -> list[Span]:
    return sorted((s for s in spans if s["parent_id"] == handoff["span_id"]), key=lambda s: s["start_us"])


def call_spans(all_traces: list[dict[str, Any]], call_id: str | None) -> list[Span]:
    """The spans of every trace holding a span with the call's conversation id."""
    found: list[Span] = []
    for raw in all_traces:
        spans = [stack.jaeger_span(s) for s in raw["spans"]]
        if any(s["attributes"].get(CONVERSATION_ID) == call_id for s in spans):
            found.extend(spans)
    return found


def delivered(spans: Sequence[Span], call_id: str | None) -> bool:
    """The call's transition, at least one of its phases and its linked first speech are in."""
    handoff = handoff_of(spans, call_id)
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
@dataclass
class Network:
    """The bot's namespace (with Jaeger), the caller's, and the wire between them (``shaper.py``)."""

    bot: netns.Namespace
    caller: netns.Namespace
    wire: netns.Namespace
    interfaces: tuple[str, str]

    @classmethod
    def create(cls, bot: netns.Namespace, workdir: Path) -> Network:
        caller, wire = netns.Namespace.create(workdir / "caller"), netns.Namespace.create(workdir / "wire")
        interfaces = shaper.wire(bot, caller, wire, "pc", (BOT_ADDRESS, CALLER_ADDRESS))
        return cls(bot, caller, wire, interfaces)

    def stop(self) -> None:
        self.caller.stop()
        self.wire.stop()


def environment(service: str, measurements: Path, **extra: str) -> dict[str, str]:
    """The deployment's environment: the user's variables only (no OTEL_* of the test run's),
    ``OTEL_HANDOFF_AUTO_INSTRUMENT``, the OTLP endpoint; the harness's import path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        OTEL_HANDOFF_AUTO_INSTRUMENT="true",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://jaeger:4317",
        OTEL_SERVICE_NAME=service,
        PIPECAT_CALL_MEASUREMENTS=str(measurements),
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")])),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def _serving(log: Path) -> bool:
    return "Uvicorn running on" in log.read_text(errors="replace")


def deploy(
    network: Network,
    link: shaper.Link,
    jaeger: stack.Jaeger,
    name: str,
    calls: Sequence[Call],
    browser: bool = False,
    bot: str = "bot.py",
    **env: str,
) -> Deployment:
    """Run ``calls`` one after another against a fresh runner of ``bot`` (``bot.py``, the Flows
    bot, or ``workers_bot.py``) across ``link``, then SIGTERM it; record it all, what the shaper
    applied included. The caller is aiortc's (``caller.py``), or with ``browser`` Chromium
    (``browser.py``)."""
    space = network.bot
    record = space.workdir / f"shaped-{name}.json"
    forwarder = shaper.start(network.wire, network.interfaces, link, record, seed=len(name))
    try:
        script = "browser.py" if browser else "caller.py"
        deployment = _deploy(network, jaeger, name, calls, script, bot, **env)
    finally:
        netns.stop(forwarder)
    deployment.link = link
    deployment.shaped = shaper.read_record(record) if record.exists() else []
    return deployment


def _deploy(
    network: Network,
    jaeger: stack.Jaeger,
    name: str,
    calls: Sequence[Call],
    script: str,
    bot_script: str,
    **env: str,
) -> Deployment:
    space = network.bot
    started = time.monotonic()
    service = f"pipecat-support-{name}"
    measurements = space.workdir / f"measure-{name}.jsonl"
    environment_ = environment(service, measurements, **env)
    log = space.workdir / f"bot-{name}.log"
    command = [sys.executable, str(HERE / bot_script), "-t", "webrtc", "--host", "0.0.0.0"]
    bot = space.start([*command, "--port", str(PORT)], log, environment_)
    deployment = Deployment(name, service, space.workdir)
    caller = None
    try:
        wait_until(
            lambda: bot.poll() is not None or _serving(log), "the runner to serve", timeout=60, every=0.1
        )
        assert bot.poll() is None, f"the runner exited: {stack._tail(log)}"
        caller_env = {k: v for k, v in environment_.items() if not k.startswith("OTEL_")}
        caller = Caller(network.caller, space.workdir, caller_env, script)
        for number, call in enumerate(calls, 1):
            record = CallRecord(call, caller.call(call), time.monotonic())
            deployment.calls.append(record)
            if number == len(calls):
                break  # the deployment stops right after its last call
            # before the next call: this one's transition, within seconds of the caller hanging up
            record.arrival_s = arrived_within(
                lambda call_id=record.id: delivered(call_spans(traces(jaeger, service), call_id), call_id),
                ARRIVAL_SECONDS,
            )
        os.kill(bot.pid, signal.SIGTERM)  # as a deployment stops it
        with contextlib.suppress(subprocess.TimeoutExpired):
            deployment.bot_exit = bot.wait(STOP_TIMEOUT)
    finally:
        if caller is not None:
            caller.close()
        netns.stop(bot)
    _read_back(jaeger, deployment)
    if measurements.exists():
        deployment.records = [json.loads(line) for line in measurements.read_text().splitlines()]
    deployment.seconds = time.monotonic() - started
    return deployment


def _read_back(jaeger: stack.Jaeger, deployment: Deployment) -> None:
    """After the bot exited: each call's trace through ``/api/traces/<id>``, once everything
    expected is in or the deadline passed (no process is left to send anything later)."""

    def complete() -> bool:
        everything = traces(jaeger, deployment.service)
        return all(
            delivered(spans, c.id) and {s["name"] for s in spans} >= set(EXPECTED_IN_TRACE)
            for c in deployment.calls
            for spans in [call_spans(everything, c.id)]
        )

    arrived_within(complete, READ_BACK_SECONDS)
    last = deployment.calls[-1] if deployment.calls else None
    if last is not None and delivered(call_spans(traces(jaeger, deployment.service), last.id), last.id):
        last.arrival_s = time.monotonic() - last.left  # the bot stopped meanwhile: SIGTERM included
    everything = traces(jaeger, deployment.service)
    (deployment.workdir / f"traces-{deployment.name}.json").write_text(json.dumps(everything))
    deployment.all_spans = [stack.jaeger_span(s) for raw in everything for s in raw["spans"]]
    for call in deployment.calls:
        ids = {s["trace_id"] for s in call_spans(everything, call.id)}
        for trace_id in sorted(ids):
            answer = jaeger.get(f"/api/traces/{trace_id}")
            (raw,) = answer["data"]
            call.spans.extend(stack.jaeger_span(s) for s in raw["spans"])
            call.warnings.update({s["spanID"]: s["warnings"] for s in raw["spans"] if s.get("warnings")})
