"""A real Pipecat call to a bot split into workers (issue 49): the worker handoff, as the caller
hears it, explained from the trace alone.

The deployment is the Flows call's (``tests/pipecat_call/``: the development runner with
``OTEL_HANDOFF_AUTO_INSTRUMENT=true`` and the standard ``OTEL_*`` variables, aiortc's caller in a
namespace of its own, the link unshaped, the suite's Jaeger) with the other bot,
``pipecat_call/workers_bot.py``: a session worker (transport, STT, the shared context) and two
``LLMWorker`` agents bridged to it over the bus, each with its own voice. Triage greets; after the
caller's turn it says it transfers the caller and, in the same response, calls
``transfer_to_billing``, which hands over with ``activate_worker("billing", deactivate_self=True)``.
The caller hears triage's farewell to its end, a silence, billing.

Two calls, one deployment, run once for the module (about 20 s). The checks and their tolerances
are the Flows call's (``call_checks.py``).
"""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import stack
from call_checks import (
    CAPTURE_TOLERANCE_US,
    accounting_problems,
    end_us,
    jaeger_warnings,
    tolerance,
    unnamed_problems,
)
from pipecat_call.deployment import (
    CONVERSATION_ID,
    EXPECTED_IN_TRACE,
    SECOND_NODE,
    Call,
    CallRecord,
    Deployment,
    Network,
    deploy,
    first_speech_of,
    handoff_of,
    phases_of,
)
from receivers import Span, missing
from shaper import Link

pytest.importorskip("pipecat.workers", reason="needs pipecat-ai >= 1.3.0 (pipecat.workers)")
pytest.importorskip("pipecat.runner.run", reason="needs pipecat-ai's runner extra")
pytest.importorskip("aiortc", reason="needs pipecat-ai's webrtc extra (aiortc)")

FIRST_WORKER = "triage"
FRAMEWORK = "pipecat-workers"
HEARD_DELAY = "agent_handoff.first_speech.heard_delay"
MISSING = "agent_handoff.first_speech.heard_delay_missing"
AWAIT_OLD_AUDIO = "agent_handoff.await_old_audio"
# the drain's flush probe waits at the session's output behind triage's farewell, then finishes
PHASES = ("handler", "await_old_audio", "drain", "bus_crossing", "setup", "first_output")
CALLS = (Call("I need help with my bill"), Call("A question about my invoice"))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    if shutil.which("espeak-ng") is None:
        missing("espeak-ng (Debian's package; the caller speaks with it)")
    space = stack.namespace(tmp_path_factory.mktemp("pipecat-workers-call"))
    network = None
    try:
        network = Network.create(space, space.workdir)
        deployment = deploy(
            network, Link("unshaped"), stack.Jaeger.start(space), "workers", CALLS, bot="workers_bot.py"
        )
        report(deployment)
        yield deployment
    finally:
        if network is not None:
            network.stop()
        space.stop()


def handoff(call: CallRecord) -> Span:
    found = handoff_of(call.spans, call.id)
    assert found is not None, f"{call.id}: no agent_handoff span with {CONVERSATION_ID}={call.id} in Jaeger"
    return found


def first_speech(call: CallRecord) -> Span:
    found = first_speech_of(call.spans, handoff(call))
    assert found is not None, f"{call.id}: no agent_handoff.first_speech linked to the handoff"
    return found


def phase(call: CallRecord, name: str) -> Span:
    found = [s for s in phases_of(call.spans, handoff(call)) if s["name"] == name]
    assert found, f"{call.id}: no {name} under the handoff"
    return found[0]


def written_ns(run: Deployment, call: CallRecord) -> int:
    """When the bot wrote billing's first audio frame to the transport (``measure.py``)."""
    found = call.measured(run.records, "first_frame", SECOND_NODE)
    assert found is not None, f"{call.id}: the bot never wrote {SECOND_NODE}'s voice"
    return found["time_ns"]


def silence(call: CallRecord) -> tuple[float, float]:
    """The caller's silence at the handoff, in seconds: as the trace tells it — from the old
    audio's end (``await_old_audio``'s) to the end of ``first_speech`` (the session's first write of
    the new voice), the two a downlink apart alike — and as the caller heard it, from where triage's
    voice stopped to where billing's started (each told 5 ms at a time)."""
    traced = (end_us(first_speech(call)) - end_us(phase(call, AWAIT_OLD_AUDIO))) / 1e6
    heard = (call.caller["onset_ns"][SECOND_NODE] - call.caller["previous_ended_ns"][SECOND_NODE]) / 1e9
    return traced, heard


# --- the calls themselves ---------------------------------------------------------------------------
def test_calls_are_heard_to_the_end(run: Deployment) -> None:
    """Every call ran as scripted: greeting, speech, triage's farewell, billing heard right after it."""
    for call in run.calls:
        assert "error" not in call.caller, f"{call.caller['error']}\n{run.bot_log()[-3000:]}"
        assert call.caller["previous_ended_ns"].get(SECOND_NODE), call.caller  # heard after triage


def test_each_call_is_one_trace_to_the_last(run: Deployment) -> None:
    """The runner ends on SIGTERM as it does with the Flows bot, and each call's trace is whole,
    the last call's included: the runner's request, Pipecat's conversation and turns, the handoff
    and its first speech."""
    assert run.bot_exit == -signal.SIGTERM, f"the runner ended with {run.bot_exit}\n{run.bot_log()[-3000:]}"
    problems = []
    for call in run.calls:
        lost = [name for name in EXPECTED_IN_TRACE if name not in {s["name"] for s in call.spans}]
        if lost:
            problems.append(f"{call.id}: {lost} not in Jaeger")
        if len({s["trace_id"] for s in call.spans}) != 1:
            problems.append(f"{call.id}: in {len({s['trace_id'] for s in call.spans})} traces")
    assert not problems, "\n".join(problems)


# --- what the spans say -------------------------------------------------------------------------------
def test_the_handoff_names_the_workers_and_what_it_did(run: Deployment) -> None:
    """One worker handoff per call, triage to billing by its tool, carrying the conversation id the
    bot gave its session worker; its phases in order, the wait for the old audio and the bus
    crossing among them."""
    for call in run.calls:
        span = handoff(call)
        attributes = span["attributes"]
        assert attributes["agent_handoff.framework"] == FRAMEWORK, attributes
        assert (attributes["agent_handoff.from_agent.name"], attributes["agent_handoff.to_agent.name"]) == (
            FIRST_WORKER,
            SECOND_NODE,
        )
        assert attributes["gen_ai.tool.name"] == "transfer_to_billing", attributes
        assert first_speech(call)["attributes"].get(CONVERSATION_ID) == call.id
        found = [s["name"].removeprefix("agent_handoff.") for s in phases_of(call.spans, span)]
        assert found == list(PHASES), f"{call.id}: {found}"
        assert len([s for s in call.spans if s["name"] == "agent_handoff"]) == 1


def test_first_speech_ends_at_the_new_workers_first_audio(run: Deployment) -> None:
    """The silence ends when billing's first audio frame is written to the transport (5 ms)."""
    problems = []
    for call in run.calls:
        off_us = end_us(first_speech(call)) - written_ns(run, call) / 1000
        if abs(off_us) > CAPTURE_TOLERANCE_US:
            problems.append(f"{call.id}: first speech ends {off_us / 1000:+.2f} ms from the write")
    assert not problems, "\n".join(problems)


def test_phases_cover_the_handoff(run: Deployment) -> None:
    """No gap of 1 ms or more between the handoff's phases, or the span says what they leave; and
    the named phases cover at least 90 % of it."""
    problems = []
    for call in run.calls:
        span = handoff(call)
        problems += accounting_problems(call.id, span, phases_of(call.spans, span))
        problems += unnamed_problems(call.id, span, phases_of(call.spans, span))
    assert not problems, "\n".join(problems)


def test_the_callers_silence_is_the_traces(run: Deployment) -> None:
    """The silence the caller heard between triage's last frame and billing's first is the trace's,
    from the old audio's end to the first speech's end, within the heard delay's tolerance (30 ms,
    plus 1.5 times the jitter reported): both ends cross the same downlink a few dozen ms apart,
    so its delay, ``heard_delay``, is in both."""
    problems = []
    for call in run.calls:
        traced, heard = silence(call)
        allowed = tolerance(first_speech(call)["attributes"])
        print(f"\n{call.id}: silence traced {traced * 1000:.1f} ms, heard {heard * 1000:.1f} ms")
        if abs(traced - heard) > allowed:
            problems.append(
                f"{call.id}: the trace's silence {traced * 1000:.1f} ms, the caller's {heard * 1000:.1f} ms"
                f" (allowed ±{allowed * 1000:.1f})"
            )
    assert not problems, "\n".join(problems)


def test_the_caller_hears_billing_no_sooner_than_the_estimate(run: Deployment) -> None:
    """``first_speech`` has ``heard_delay`` (or says why it has none), and the aiortc caller hears
    billing no sooner than the write plus that estimate (less the tolerance): its fixed jitter
    buffer hears later than the browser the estimate describes, as on the Flows calls."""
    problems = []
    for call in run.calls:
        attributes = first_speech(call)["attributes"]
        estimated = attributes.get(HEARD_DELAY)
        if estimated is None:
            assert attributes.get(MISSING) == "no_round_trip", attributes
            continue
        measured = (call.caller["first_heard_ns"][SECOND_NODE] - written_ns(run, call)) / 1e9
        print(f"\n{call.id}: {HEARD_DELAY} {estimated * 1000:.1f} ms, aiortc heard {measured * 1000:.1f} ms")
        if measured < estimated - tolerance(attributes):
            problems.append(
                f"{call.id}: {HEARD_DELAY} {estimated * 1000:.1f} ms, heard {measured * 1000:.1f} ms"
            )
    assert not problems, "\n".join(problems)


def test_jaeger_has_no_warnings_on_our_spans(run: Deployment) -> None:
    """``/api/traces/<id>`` notes nothing on a span of ours (e.g. a child outliving its parent)."""
    problems = [p for call in run.calls for p in jaeger_warnings(call.id, call.spans, call.warnings)]
    assert not problems, "\n".join(problems)


# --- the measurements, for the record ------------------------------------------------------------------
def report(run: Deployment) -> None:
    """Per call (``-s``): the handoff's phases, the silence traced and heard, the heard delay."""
    print(f"\n{run.name}: {run.seconds:.1f} s, bot exit {run.bot_exit}")
    for call in run.calls:
        span = handoff_of(call.spans, call.id)
        if span is None or "error" in call.caller:
            print(f"  {call.id}: {call.caller.get('error') or 'no handoff in Jaeger'}")
            continue
        phases = ", ".join(
            f"{p['name'].removeprefix('agent_handoff.')} {_ms(p)}" for p in phases_of(call.spans, span)
        )
        speech: dict[str, Any] = (first_speech_of(call.spans, span) or {}).get("attributes", {})
        print(f"  {call.id}: handoff {_ms(span)} ({phases}); heard_delay {speech.get(HEARD_DELAY)}")
        written = call.measured(run.records, "first_frame", SECOND_NODE) or {}
        sent = (written.get("time_ns", 0) - (written.get("previous_ended_ns") or 0)) / 1e6
        try:
            traced, heard = silence(call)
            print(
                f"    silence traced {traced * 1000:.1f} ms, heard {heard * 1000:.1f} ms, sent {sent:.1f} ms"
            )
        except (AssertionError, KeyError) as exc:
            print(f"    silence: {exc!r}")


def _ms(span: Span) -> str:
    return f"{span['duration_us'] / 1000:.1f} ms"
