"""Real Pipecat calls over WebRTC, deployed as users deploy (issue 43): nothing of ours had run
behind a real transport.

One private network namespace holds Jaeger (the suite's binary, as ``jaeger``), the bot —
Pipecat's development runner, ``python bot.py -t webrtc`` (FastAPI, uvicorn, ``SmallWebRTCTransport``
on aiortc) with only ``OTEL_HANDOFF_AUTO_INSTRUMENT=true`` and the standard ``OTEL_*`` variables —
and an aiortc caller in its own process that offers a microphone (``POST /api/offer``), speaks
(espeak-ng) and times every frame it hears; the media crosses a veth pair inside the namespace
(aiortc gathers no candidate on a loopback). Deployments:

- ``stt``: three calls of different lengths, the scripted STT's endpointing ending the caller's
  turn, then SIGTERM right after the last call, as a deployment stops it;
- ``silero``: a call whose turns the real Silero VAD (in pipecat-ai's wheel) starts and ends.

Each deployment runs once and is recorded; the tests judge the record. Per-call measurements go to
``pipecat-call-measurements.json`` in the run's temporary folder and to stdout (``-s``).
"""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns
import pytest
import stack
from call_checks import ROUNDING_US, accounting_problems, end_us, jaeger_warnings
from pipecat_call.deployment import (
    CONVERSATION_ID,
    EXPECTED_IN_TRACE,
    SECOND_NODE,
    Call,
    CallRecord,
    Deployment,
    deploy,
    first_speech_of,
    handoff_of,
    media_link,
    phases_of,
)
from pipecat_call.waterfall import SEGMENTS, table, waterfall
from receivers import Span, missing

pytest.importorskip("pipecat.flows", reason="needs pipecat-ai >= 1.5.0 (pipecat.flows)")
pytest.importorskip("pipecat.runner.run", reason="needs pipecat-ai's runner extra")
pytest.importorskip("aiortc", reason="needs pipecat-ai's webrtc extra (aiortc)")

FRAMEWORK = "pipecat-flows"
CAPTURE_TOLERANCE_US = 5_000  # first speech ends when the new node's first audio is written
ARRIVAL_SECONDS = 5.0
HEARD_DELAY = "agent_handoff.first_speech.heard_delay"
PACKET = "agent_handoff.downlink.packet_duration"
HEARD_TOLERANCE_S = 0.030  # the estimated heard delay against the one the caller measured
# the caller's jitter buffer the estimate assumes, in aiortc's terms: 3 packets puts an aiortc
# caller where the model (docs/livekit.md) puts a browser; a caller holding more hears it later
ASSUMED_PREFETCH = 3

# one breath each (a pause would end the turn early), of different lengths; the caller's jitter
# buffer holds 3 packets, where the heard-delay estimate puts a browser's (libwebrtc's), or aiortc's
# own 4 (pipecat_call/caller.py)
CALLS = (
    Call("I need help with my bill", prefetch=3),
    Call("I have a question about the invoice I received last week", linger=0.5),
    Call("I was charged twice this month and I would like someone to look at my bill please", 1.5, 3),
)
RUNS = {"stt": (CALLS, {}), "silero": (CALLS[:1], {"BOT_VAD": "silero"})}


class Runs:
    """The shared namespace and Jaeger; each deployment run once, when first asked."""

    def __init__(self, space: netns.Namespace, jaeger: stack.Jaeger) -> None:
        self.space, self.jaeger = space, jaeger
        self.done: dict[str, Deployment] = {}
        self.failed: dict[str, Exception] = {}  # a deployment that could not run fails every test of it

    def get(self, name: str) -> Deployment:
        if name in self.failed:
            raise self.failed[name]
        if name not in self.done:
            calls, env = RUNS[name]
            try:
                self.done[name] = deploy(self.space, self.jaeger, name, calls, **env)
            except Exception as exc:
                self.failed[name] = exc
                raise
            report(self.done[name])
        return self.done[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    if shutil.which("espeak-ng") is None:
        missing("espeak-ng (Debian's package; the caller speaks with it)")
    space = stack.namespace(tmp_path_factory.mktemp("pipecat-call"))
    try:
        media_link(space)
        yield Runs(space, stack.Jaeger.start(space))
    finally:
        space.stop()


@pytest.fixture(scope="module", params=list(RUNS))
def run(request: pytest.FixtureRequest, runs: Runs) -> Deployment:
    return runs.get(request.param)


def handoff(call: CallRecord) -> Span:
    found = handoff_of(call.spans, call.id)
    assert found is not None, f"{call.id}: no agent_handoff span with {CONVERSATION_ID}={call.id} in Jaeger"
    return found


def first_speech(call: CallRecord) -> Span:
    found = first_speech_of(call.spans, handoff(call))
    assert found is not None, f"{call.id}: no agent_handoff.first_speech linked to the transition"
    return found


def written_ns(run: Deployment, call: CallRecord) -> int:
    """When the bot wrote the new node's first audio frame to the transport."""
    found = call.measured(run.records, "first_frame", SECOND_NODE)
    assert found is not None, f"{call.id}: the bot never wrote {SECOND_NODE}'s voice"
    return found["time_ns"]


# --- the calls themselves ---------------------------------------------------------------------------
def test_calls_are_heard_to_the_end(run: Deployment) -> None:
    """Every call ran as scripted: greeting, speech, transition, the new node heard, hang-up."""
    for call in run.calls:
        assert "error" not in call.caller, f"{call.caller['error']}\n{run.bot_log()[-3000:]}"
        assert SECOND_NODE in call.caller["first_heard_ns"], call.caller


# --- delivery -----------------------------------------------------------------------------------------
def test_transitions_arrive_after_each_call(run: Deployment) -> None:
    """Within seconds of the caller hanging up — before the next call, or across the SIGTERM
    that follows the last — the transition, its phases and its first speech are in Jaeger."""
    late = [f"{call.id} (linger {call.call.linger} s)" for call in run.calls if call.arrival_s is None]
    assert not late, f"transitions not in Jaeger within {ARRIVAL_SECONDS} s of the call's end: {late}"


def test_nothing_is_lost_at_sigterm(run: Deployment) -> None:
    """The runner ends as uvicorn ends on SIGTERM (the signal re-raised: it dies of it), and each
    call's trace is whole, the last call's included: the runner's request, Pipecat's conversation
    and turns, the transition and its first speech, in one trace."""
    assert run.bot_exit == -signal.SIGTERM, f"the runner ended with {run.bot_exit}\n{run.bot_log()[-3000:]}"
    problems = []
    for call in run.calls:
        lost = [name for name in EXPECTED_IN_TRACE if name not in {s["name"] for s in call.spans}]
        if lost:
            problems.append(f"{call.id}: {lost} not in Jaeger")
        if len({s["trace_id"] for s in call.spans}) != 1:
            problems.append(f"{call.id}: in {len({s['trace_id'] for s in call.spans})} traces")
    assert not problems, "\n".join(problems)


def test_the_apps_requests_are_exported_from_the_first(run: Deployment) -> None:
    """The runner's own spans (FastAPI's, one per request) are exported from the first request
    on, not from the first conversation: one ``POST /api/offer`` per call, each a trace's root."""
    offers = [s for s in run.all_spans if s["name"] == "POST /api/offer"]
    assert len(offers) == len(run.calls), [s["trace_id"] for s in offers]
    assert all(s["parent_id"] is None for s in offers)


# --- what the spans say -------------------------------------------------------------------------------
def test_transitions_carry_the_conversation(run: Deployment) -> None:
    """The transition (framework, nodes, phases) and its first speech carry the conversation id
    the bot gave its worker (the peer connection's id)."""
    problems = []
    for call in run.calls:
        span = handoff(call)
        attributes = span["attributes"]
        assert attributes.get("agent_handoff.framework") == FRAMEWORK, attributes
        assert (attributes["agent_handoff.from_agent.name"], attributes["agent_handoff.to_agent.name"]) == (
            "triage",
            SECOND_NODE,
        )
        assert phases_of(call.spans, span), f"{call.id}: the transition has no phase spans"
        for ours in (span, first_speech(call)):
            found = ours["attributes"].get(CONVERSATION_ID)
            if found != call.id:
                problems.append(f"{call.id}: {ours['name']} has {CONVERSATION_ID}={found!r}")
    assert not problems, "\n".join(problems)


def test_first_speech_ends_at_the_new_nodes_first_audio(run: Deployment) -> None:
    """The silence ends when the new node's first audio frame is written to the transport (5 ms)."""
    problems = []
    for call in run.calls:
        off_us = end_us(first_speech(call)) - written_ns(run, call) / 1000
        if abs(off_us) > CAPTURE_TOLERANCE_US:
            problems.append(f"{call.id}: first speech ends {off_us / 1000:+.2f} ms from the write")
    assert not problems, "\n".join(problems)


def test_phases_cover_the_transition(run: Deployment) -> None:
    """Between the transition's start, its phases and its end no gap reaches 1 ms, unless the span
    says how long it could not attribute (``agent_handoff.unattributed.duration``): then the
    phases and that add up to the span's duration."""
    problems = []
    for call in run.calls:
        span = handoff(call)
        problems += accounting_problems(call.id, span, phases_of(call.spans, span))
    assert not problems, "\n".join(problems)


def test_jaeger_has_no_warnings_on_our_spans(run: Deployment) -> None:
    """``/api/traces/<id>`` notes nothing on a span of ours (e.g. a child outliving its parent)."""
    problems = [p for call in run.calls for p in jaeger_warnings(call.id, call.spans, call.warnings)]
    assert not problems, "\n".join(problems)


def callers_buffer_beyond_the_estimate(call: CallRecord, attributes: dict[str, Any]) -> float:
    """Seconds the test's caller buffers beyond what the estimate assumes of a caller's buffer.

    The estimate takes a browser's adaptive buffer: it grows with the jitter the caller reports
    (four times it). aiortc's is fixed, ``prefetch`` packets whatever the jitter: three of them
    stand where the estimate puts a browser's at no jitter, each one more is a packet later."""
    jitter_margin = 4 * attributes.get("agent_handoff.downlink.jitter", 0.0)
    return (call.call.prefetch - ASSUMED_PREFETCH) * attributes[PACKET] - jitter_margin


def test_heard_delay_matches_the_caller(run: Deployment) -> None:
    """``heard_delay`` (from aiortc's RTCP reports and the codec's framing) is within 30 ms of
    what the caller measured: its first hearing of the new node less the bot's first write of it.
    The caller's jitter buffer is the one part the bot's side cannot know: the test's caller keeps
    aiortc's fixed one, so the estimate is held to it with that buffer in place of the adaptive one
    it assumes (:func:`callers_buffer_beyond_the_estimate`)."""
    problems = []
    for call in run.calls:
        measured = (call.caller["first_heard_ns"][SECOND_NODE] - written_ns(run, call)) / 1e9
        attributes = first_speech(call)["attributes"]
        estimated = attributes.get(HEARD_DELAY)
        if estimated is None:
            problems.append(f"{call.id}: no {HEARD_DELAY} (the caller measured {measured * 1000:.1f} ms)")
            continue
        buffered_more = callers_buffer_beyond_the_estimate(call, attributes)
        print(
            f"\n{call.id} (prefetch {call.call.prefetch}): {HEARD_DELAY} {estimated * 1000:.1f} ms"
            f" ({buffered_more * 1000:+.1f} ms: the caller's buffer), measured {measured * 1000:.1f} ms"
        )
        if abs(estimated + buffered_more - measured) > HEARD_TOLERANCE_S:
            problems.append(
                f"{call.id}: {HEARD_DELAY} {estimated * 1000:.1f} ms {buffered_more * 1000:+.1f} ms,"
                f" measured {measured * 1000:.1f} ms"
            )
    assert not problems, "\n".join(problems)


def transcribed(run: Deployment, call: CallRecord) -> dict[str, Any]:
    """The STT's transcript of the caller's speech in this call (``measure.py``)."""
    found = [
        r
        for r in run.records
        if r["event"] == "transcribed"
        and call.caller["speech_started_ns"] <= r["time_ns"] <= written_ns(run, call)
    ]
    assert len(found) == 1, f"{call.id}: transcripts {found}"
    return found[0]


def test_waterfall_adds_up_to_what_the_caller_heard(runs: Runs) -> None:
    """The waterfall of each call (``pipecat_call/waterfall.py``, the doc's table) has its rows in
    order and the transition's phases inside it; the transition starts after the STT's transcript
    (the trace agrees with the bot's instrument); the new node's first audio is the bot's write (5
    ms); the downlink is within 30 ms of what the caller measured and so is the whole, from the
    caller's end of speech to its hearing the new node (beyond the packets its buffer holds more).
    Only where the STT's endpointing ended the turn (the stt deployment): Silero's is its own."""
    run = runs.get("stt")
    problems = []
    for call in run.calls:
        speech = first_speech(call)
        rows = waterfall(
            call.spans, handoff(call), speech, call.caller["end_of_speech_ns"], transcribed(run, call)
        )
        main = {r.name: r for r in rows if not r.part}
        print(f"\n{call.id} (prefetch {call.call.prefetch}):\n{table(rows)}")
        assert list(main) == list(SEGMENTS), list(main)
        whole = handoff(call)
        problems += [
            f"{call.id}: {r.name} outside the transition"
            for r in rows
            if r.part
            and not (whole["start_us"] - ROUNDING_US <= r.start_us <= r.end_us <= end_us(whole) + ROUNDING_US)
        ]
        problems += [f"{call.id}: {r.name} runs backwards" for r in main.values() if r.end_us < r.start_us]
        spoken = call.caller["end_of_speech_ns"] / 1000
        heard = call.caller["first_heard_ns"][SECOND_NODE] / 1000
        written = written_ns(run, call) / 1000
        buffered_more = callers_buffer_beyond_the_estimate(call, speech["attributes"]) * 1e6
        checks = [
            (
                "first audio",
                main["new node's model, TTS, first audio"].end_us - written,
                CAPTURE_TOLERANCE_US,
            ),
            (
                "downlink",
                main["downlink"].ms * 1000 + buffered_more - (heard - written),
                HEARD_TOLERANCE_S * 1e6,
            ),
            (
                "end of speech → heard",
                main["downlink"].end_us + buffered_more - main["uplink"].start_us - (heard - spoken),
                HEARD_TOLERANCE_S * 1e6,
            ),
        ]
        for name, off_us, tolerance in checks:
            print(f"  {name}: {off_us / 1000:+.1f} ms from the measurement")
            if abs(off_us) > tolerance:
                problems.append(f"{call.id}: {name} {off_us / 1000:+.1f} ms from what was measured")
    assert not problems, "\n".join(problems)


def test_the_docs_waterfall_names_the_rows_the_trace_gives() -> None:
    """``docs/pipecat.md``'s waterfall (figures pasted from a run of this file) has the rows
    :func:`waterfall` builds, in its order: the milliseconds vary from run to run, the rows not."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "pipecat.md").read_text()
    section = doc.split("## A real call: where the caller's silence goes", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    named = [row for row in rows if row not in ("segment", "**end of speech → heard**")]
    assert [row for row in named if not row.startswith("↳")] == list(SEGMENTS), named
    phases = {"handler", "function_call_wait", "pre_actions", "summary", "context_update", "post_actions"}
    assert all(row.removeprefix("↳ ") in {*phases, "unattributed"} for row in named if row.startswith("↳")), (
        named
    )


def test_silero_vad_drives_the_callers_turn(runs: Runs) -> None:
    """In the Silero deployment the STT proposes no turn: the real Silero VAD's frames start the
    caller's turn and end it (with the speech timeout), as Pipecat's own log says; in the other,
    the STT's proposals do."""
    log = runs.get("silero").bot_log()
    assert "User started speaking (strategy: VADUserTurnStartStrategy" in log, log[-3000:]
    assert "SpeechTimeoutUserTurnStopStrategy#0 VADUserStoppedSpeakingFrame received" in log, log[-3000:]
    assert "User turn inference triggered (strategy: SpeechTimeoutUserTurnStopStrategy" in log, log[-3000:]
    assert "VADUserTurnStartStrategy" not in runs.get("stt").bot_log()


# --- the statistics, read as aiortc gives them -------------------------------------------------------
def test_downlink_from_aiortcs_receiver_report() -> None:
    """aiortc's ``remote-inbound-rtp`` gives the round trip in seconds and the jitter in RTP
    timestamp units: the downlink has both in seconds (Opus: a 48 kHz clock, 20 ms packets)."""
    from aiortc.stats import RTCRemoteInboundRtpStreamStats

    from otel_handoff.core.heard import Downlink
    from otel_handoff.pipecat import _downlink

    report = RTCRemoteInboundRtpStreamStats(
        timestamp=None,
        type="remote-inbound-rtp",
        id="remote-inbound-rtp_1",
        ssrc=1,
        kind="audio",
        transportId="transport_1",
        packetsReceived=100,
        packetsLost=2,
        jitter=96,
        roundTripTime=0.004,
        fractionLost=0,
    )
    link = _downlink.downlink([report], "audio/opus", 48000, None)
    assert link == Downlink(0.004, 0.002, 2, 0.020, "audio/opus")
    # before the first receiver report: nothing is known of the way, and no estimate is made
    assert _downlink.downlink([], "audio/opus", 48000, None).round_trip_time is None


async def test_the_codec_sent_is_the_answers_first() -> None:
    """The bot answers the caller's offer; aiortc sends with the first audio codec of that answer."""
    from aiortc import AudioStreamTrack, RTCPeerConnection

    from otel_handoff.pipecat import _downlink

    caller, bot = RTCPeerConnection(), RTCPeerConnection()
    try:
        caller.addTransceiver(AudioStreamTrack(), direction="sendrecv")
        await caller.setLocalDescription(await caller.createOffer())
        await bot.setRemoteDescription(caller.localDescription)
        await bot.setLocalDescription(await bot.createAnswer())
        assert _downlink.sent_codec(bot) == ("audio/opus", 48000, None)
        assert _downlink.sent_codec(RTCPeerConnection()) == (None, None, None)  # nothing negotiated
    finally:
        await caller.close()
        await bot.close()


# --- the measurements, for the record ------------------------------------------------------------------
def report(run: Deployment) -> None:
    """Per call: the caller's end of speech, the bot's first write of the new node, the caller's
    first hearing of it, the delays between, and what the first speech span says."""
    rows = []
    for call in run.calls:
        caller = call.caller
        written = (call.measured(run.records, "first_frame", SECOND_NODE) or {}).get("time_ns")
        spoken, heard = caller.get("end_of_speech_ns"), caller.get("first_heard_ns", {}).get(SECOND_NODE)
        span = handoff_of(call.spans, call.id)
        speech = span and first_speech_of(call.spans, span)
        rows.append(
            {
                "call": call.id,
                "prefetch": call.call.prefetch,
                "downlink_ms": _ms(written, heard),
                "end_of_speech_to_write_ms": _ms(spoken, written),
                "end_of_speech_to_heard_ms": _ms(spoken, heard),
                "first_speech_end_minus_write_ms": speech and written and _ms(written, end_us(speech) * 1000),
                "first_speech": speech and speech["attributes"],
                "transition_us": span and span["duration_us"],
                "spans_arrived_after_s": call.arrival_s and round(call.arrival_s, 2),
                "caller_inbound": caller.get("inbound_at_first_heard"),
                "error": caller.get("error"),
            }
        )
    out = run.workdir / "pipecat-call-measurements.json"
    existing = json.loads(out.read_text()) if out.exists() else {}
    existing[run.name] = {"seconds": round(run.seconds, 1), "bot_exit": run.bot_exit, "calls": rows}
    out.write_text(json.dumps(existing, indent=1))
    print(f"\n{run.name}: {run.seconds:.1f} s, bot exit {run.bot_exit} ({out})")
    for row in rows:
        print(
            f"  {row['call']} (prefetch {row['prefetch']}): end of speech → write"
            f" {row['end_of_speech_to_write_ms']} ms, downlink {row['downlink_ms']} ms, first speech"
            f" {row['first_speech_end_minus_write_ms']} ms after the write, spans after"
            f" {row['spans_arrived_after_s']} s"
        )


def _ms(start_ns: float | None, end_ns: float | None) -> float | None:
    return None if start_ns is None or end_ns is None else round((end_ns - start_ns) / 1e6, 2)
