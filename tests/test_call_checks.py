"""The real calls' checks can fail (issue 51): what ``call_checks`` holds a call to, on calls made up
here, so these run wherever the suite does (the real calls need livekit-server, Jaeger and
network namespaces)."""

from __future__ import annotations

from call_checks import HEARD_TOLERANCE_S, STALL_S, heard_problem, source_lag_s

FRAME_S = 0.010  # livekit-agents hands its audio source 10 ms frames
QUEUE_S = 0.200  # what its room output's source holds


def taken(
    frames: int = 40,
    *,
    sender_late_from: int | None = None,
    late_s: float = 0.0,
    pauses: dict[int, float] | None = None,
) -> list[list[float]]:
    """An agent's first words as its source takes them ([called_ns, returned_ns, seconds] each):
    asked for as soon as the one before returned (``pauses``: the loop busy that long before frame
    k), returned once all but what the source holds of the audio up to it has left at real time
    (``late_s`` later from frame ``sender_late_from`` on: the native sender starved)."""
    found, now, sent = [], 1_000.0, 0.0
    first = now
    for k in range(frames):
        now += (pauses or {}).get(k, 0.0)
        called = now
        sent += FRAME_S
        late = late_s if sender_late_from is not None and k >= sender_late_from else 0.0
        now = max(called, first + sent - QUEUE_S + late)
        found.append([called * 1e9, now * 1e9, FRAME_S])
    return found


def test_a_source_at_real_time_has_no_lag() -> None:
    assert source_lag_s(taken(), QUEUE_S) < 1e-6


def test_a_starved_native_sender_is_a_lag() -> None:
    """The process's sender took the audio 70 ms late from the 25th frame on (past what the source
    holds): its captures returned that much later."""
    lag = source_lag_s(taken(sender_late_from=25, late_s=0.070), QUEUE_S)
    assert abs(lag - 0.070) < 1e-6 and lag >= STALL_S


def test_a_starved_loop_is_a_lag_once_the_source_ran_dry() -> None:
    """The loop busy 160 ms after 10 frames: the source held 100 ms, so it ran dry for 60 ms; busy
    as long once the source is full, it still held audio: no lag."""
    assert abs(source_lag_s(taken(pauses={10: 0.160}), QUEUE_S) - 0.060) < 1e-6
    assert source_lag_s(taken(pauses={30: 0.160}), QUEUE_S) < 1e-6


def test_an_estimate_off_by_more_than_the_tolerance_fails_a_call_that_did_not_stall() -> None:
    """The loaded run's miss (81.1 ms estimated, 112.5 ms heard) fails a call whose audio did not
    stall, either way; where it stalled, only an estimate over what was heard fails."""
    assert heard_problem("call", 0.0811, 0.1125, HEARD_TOLERANCE_S, []) is not None
    assert heard_problem("call", 0.1125, 0.0811, HEARD_TOLERANCE_S, []) is not None
    assert heard_problem("call", 0.0811, 0.1125, HEARD_TOLERANCE_S, ["the source 70 ms behind"]) is None
    assert heard_problem("call", 0.1125, 0.0811, HEARD_TOLERANCE_S, ["the source 70 ms behind"]) is not None
    assert heard_problem("call", 0.0811, 0.0950, HEARD_TOLERANCE_S, []) is None
