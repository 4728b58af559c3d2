"""What every real call of the suite (LiveKit's, Pipecat's) holds its trace in Jaeger to.

A call's spans come back from Jaeger's query API as :class:`receivers.Span` dicts (microseconds);
these checks read them the same way whichever framework made them.
"""

from __future__ import annotations

from typing import Any

from receivers import Span

GAP_US = 1_000  # uncovered time between a handoff's phases that the span must then report
ROUNDING_US = 1  # Jaeger keeps microseconds: each span boundary may be off by one
ROUNDING_S = 0.001  # what a forwarder in user space sends late (shaper.py records it)
# the heard delay against what the caller heard, each stated once, with its reason, in docs/pipecat.md
# ("How close the estimate must be"): 30 ms, plus the spread of the one round trip the estimate
# halves, 1.5 times the jitter reported (a delay uniform in ±J reports a jitter of 2J/3)
HEARD_TOLERANCE_S = 0.030
LINK_SPREAD = 1.5
# the agent's own audio stalled: the shaper saw nothing of it for 3 packets (60 ms) or more (Pipecat),
# or its audio source fell as far behind real time (LiveKit: :func:`source_lag_s`). The caller's
# jitter buffer grows on the burst that follows and keeps it for seconds, past what the receiver's
# jitter (RFC 3550's, which forgets within a third of a second) still shows
STALL_S = 0.060
# the browser's own playout ran dry (Chromium starved of the CPU, or its input stalled): it concealed
# more than the packets it lost by as much (60 ms, at 48 kHz), and NetEq grows its buffer on that
DRY_SAMPLES = round(STALL_S * 48_000)
OPUS_PACKET_SAMPLES = 960  # 20 ms at 48 kHz: what NetEq conceals for one lost packet
# first speech ends when the new agent's first audio is written to the WebRTC transport
CAPTURE_TOLERANCE_US = 5_000
UNATTRIBUTED = "agent_handoff.unattributed.duration"
JITTER = "agent_handoff.downlink.jitter"
NAMED_SHARE = 0.9  # of a handoff, what its named phases must cover (issue 51): the rest is unattributed


def tolerance(attributes: dict[str, Any]) -> float:
    """How far the heard-delay estimate may be from what a browser heard (docs/pipecat.md, what the
    caller hears): 30 ms, and the spread of the one round trip the estimate halves: 1.5 times the
    jitter the caller reports, the extent of a delay uniform in ±J whose reported jitter is 2J/3."""
    return HEARD_TOLERANCE_S + LINK_SPREAD * attributes.get(JITTER, 0.0)


def end_us(span: Span) -> int:
    return span["start_us"] + span["duration_us"]


def covered_us(span: Span, phases: list[Span]) -> tuple[int, list[tuple[str, int]]]:
    """How much of the handoff its phases cover (µs), and the gaps between them (before which
    phase, how long)."""
    start, end = span["start_us"], end_us(span)
    covered, cursor, gaps = 0, start, []
    for phase in phases:
        begin, finish = max(phase["start_us"], cursor), min(end_us(phase), end)
        if begin > cursor:
            gaps.append((phase["name"], begin - cursor))
        if finish > begin:
            # a phase the framework's own span stood for (LiveKit 1.8.2+): placed by that span's end,
            # it counts its seconds on the handoff, not where it lies
            covered += phase["duration_us"] if phase.get("stood_for") else finish - begin
            cursor = finish
    if end > cursor:
        gaps.append(("the end", end - cursor))
    return covered, gaps


def accounting_problems(label: str, span: Span, phases: list[Span]) -> list[str]:
    """Between the handoff's start, its phases and its end no gap reaches 1 ms, unless the span
    says how long it could not attribute (``agent_handoff.unattributed.duration``): then the
    phases and that add up to the span's duration."""
    covered, gaps = covered_us(span, phases)
    wide = [(name, us) for name, us in gaps if us >= GAP_US]
    unattributed = span["attributes"].get(UNATTRIBUTED)
    if unattributed is None:
        return [f"{label}: gaps of ≥ 1 ms before {wide} (µs) and no {UNATTRIBUTED}"] if wide else []
    if abs(covered + unattributed * 1e6 - span["duration_us"]) > ROUNDING_US * (2 * len(phases) + 2):
        return [
            f"{label}: phases {covered} µs + unattributed {unattributed * 1e6:.0f} µs"
            f" ≠ the span's {span['duration_us']} µs"
        ]
    return []


def unnamed_problems(label: str, span: Span, phases: list[Span]) -> list[str]:
    """The handoff's named phases cover at least :data:`NAMED_SHARE` of it: the rest, what
    ``agent_handoff.unattributed.duration`` holds (a span reports it from 1 ms on), is at most
    a tenth. Read from the phases themselves, so a rest under 1 ms is held too."""
    covered, gaps = covered_us(span, phases)
    unnamed = span["duration_us"] - covered
    print(f"\n{label}: {unnamed} of {span['duration_us']} µs not in a named phase; the gaps (µs): {gaps}")
    if unnamed > (1 - NAMED_SHARE) * span["duration_us"]:
        return [f"{label}: {unnamed} of {span['duration_us']} µs not in a named phase, gaps (µs) {gaps}"]
    return []


def heard_problem(
    label: str, estimated: float, measured: float, allowed: float, stalled: list[Any]
) -> str | None:
    """The heard delay's estimate against what the caller heard (seconds): within ``allowed``
    either way; where the agent's audio stalled (``stalled`` says how; empty where it did not), the
    caller hears it later than any statistic shows, never sooner: then only no sooner than the
    estimate less ``allowed`` (docs/pipecat.md, docs/livekit.md)."""
    off = estimated - measured
    if off > allowed or (not stalled and off < -allowed):
        return (
            f"{label}: heard_delay {estimated * 1000:.1f} ms, heard {measured * 1000:.1f} ms"
            f" ({off * 1000:+.1f} ms, allowed ±{allowed * 1000:.1f}); the agent's audio stalled {stalled}"
        )
    return None


def source_lag_s(frames: list[list[float]], queue_s: float) -> float:
    """How far behind real time an audio source fell while it took ``frames`` ([called_ns,
    returned_ns, seconds] each, in order; the source holds ``queue_s``). From the first frame on, a
    sender at real time needs each frame once the audio before it has played, and a capture returns
    as soon as all but ``queue_s`` of the audio up to it has left. The most a frame was asked for
    after it was needed (the process's loop late: the source ran dry) or a capture returned after
    it would have (the process's native sender late), in seconds."""
    first = frames[0][0] / 1e9
    lag, taken = 0.0, 0.0
    for called_ns, returned_ns, seconds in frames:
        called = called_ns / 1e9
        lag = max(lag, called - first - taken)
        taken += seconds
        lag = max(lag, returned_ns / 1e9 - max(called, first + taken - queue_s))
    return lag


def jaeger_warnings(label: str, spans: list[Span], warnings: dict[str, Any]) -> list[str]:
    """What ``/api/traces/<id>`` notes on a span of ours (e.g. a child outliving its parent)."""
    return [
        f"{label}: {span['name']}: {warnings[span['span_id']]}"
        for span in spans
        if span["name"].startswith("agent_handoff") and span["span_id"] in warnings
    ]
