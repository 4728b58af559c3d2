"""The core model on its own: what every framework's handoffs get from the one emitter and conversation.

The frameworks' tests check the same on real runs (``support.ConventionScan`` checks every handoff
of the suite: no phase outlives its span, phases and the unattributed time cover it); here each
rule gets the input that makes it matter, which a real run gives only by chance.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context
from support import OpenSpans, Spans

from otel_handoff.core import schema as sc
from otel_handoff.core.conversation import Conversation
from otel_handoff.core.emit import emit, emit_late_phase
from otel_handoff.core.record import HandoffRecord, PhaseRecord
from otel_handoff.core.spans import HandoffTelemetry
from otel_handoff.pipecat import PipecatFlowsHandoffInstrumentor

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _record(end_ns: int, *phases: tuple[str, int, int], parent: Any = None) -> HandoffRecord:
    return HandoffRecord(
        start_ns=T0,
        end_ns=end_ns,
        sequence=1,
        outcome=sc.OUTCOME_COMPLETED,
        parent=parent or otel_context.Context(),
        phases=[PhaseRecord(name, T0 + start, T0 + end) for name, start, end in phases],
    )


@pytest.mark.parametrize(
    ("phases", "end", "unattributed"),
    [
        # the loop ran other work for 7 ms between close and start (seen in a real LiveKit call)
        (((sc.DRAIN, 0, 2 * MS), (sc.CLOSE, 2 * MS, 3 * MS), (sc.START, 10 * MS, 12 * MS)), 12 * MS, 7 * MS),
        # sub-millisecond steps between phases, in all under 1 ms: nothing to say
        (
            ((sc.DRAIN, 0, 2 * MS), (sc.CLOSE, 2 * MS + 300_000, 3 * MS), (sc.START, 3 * MS, 4 * MS)),
            4 * MS,
            0,
        ),
        # several short gaps that add up to more than 1 ms are said, all of them
        (
            ((sc.DRAIN, 0, MS), (sc.CLOSE, MS + 600_000, 2 * MS), (sc.START, 2 * MS + 600_000, 3 * MS)),
            3 * MS,
            1_200_000,
        ),
        # a nested phase inside another covers nothing more; the tail after the last phase counts
        (((sc.START, 0, 5 * MS), (sc.PHASE_REALTIME_UPDATE, MS, 2 * MS)), 8 * MS, 3 * MS),
    ],
)
def test_time_in_no_phase_is_said_from_one_millisecond(
    telemetry: HandoffTelemetry, spans: Spans, phases: Any, end: int, unattributed: int
) -> None:
    emit(telemetry, _record(T0 + end, *phases))
    [handoff] = spans.handoffs()
    found = handoff.attributes.get(sc.UNATTRIBUTED_DURATION)
    assert found == (pytest.approx(unattributed / 1e9) if unattributed else None)


def test_time_in_no_phase_of_phases_side_by_side_is_what_their_union_leaves(
    telemetry: HandoffTelemetry, spans: Spans
) -> None:
    """A realtime handoff's session update runs within the old response's drain: their sum
    exceeds the span, so only their union shows the 4 ms the loop ran other work (seen on a loaded
    machine in the real websocket test)."""
    phases = (
        (sc.PHASE_ON_HANDOFF, 0, MS),
        (sc.PHASE_SETTINGS, MS, 2 * MS),
        (sc.PHASE_SESSION_UPDATE, 6 * MS, 40 * MS),
        (sc.PHASE_RESPONSE_DRAIN, 6 * MS, 300 * MS),
        (sc.PHASE_FIRST_AUDIO, 300 * MS, 400 * MS),
    )
    record = _record(T0 + 400 * MS, *phases)
    record.phases_overlap = True  # without it, the sum of the phases hides the gap (the suite's scan fails)
    emit(telemetry, record)
    [handoff] = spans.handoffs()
    assert handoff.attributes[sc.UNATTRIBUTED_DURATION] == pytest.approx(4 * MS / 1e9)


def test_a_phase_that_ends_after_its_handoff_goes_beside_it(
    telemetry: HandoffTelemetry, spans: Spans
) -> None:
    app = telemetry.tracer.start_span("app")
    emitted = emit(telemetry, _record(T0 + 2 * MS, (sc.START, 0, 2 * MS), parent=set_span_in_context(app)))
    app.end()
    emit_late_phase(telemetry, emitted, PhaseRecord(sc.PHASE_ON_ENTER, T0 + MS, T0 + 5 * MS))
    emit_late_phase(telemetry, emitted, PhaseRecord(sc.PHASE_ON_ENTER, T0 + MS, T0 + 2 * MS))
    [handoff] = spans.handoffs()
    inside, beside = sorted(spans.named(sc.SPAN_ON_ENTER), key=lambda s: s.end_time)
    assert inside.parent.span_id == handoff.context.span_id
    assert beside.parent.span_id == handoff.parent.span_id == app.get_span_context().span_id
    assert [link.context.span_id for link in beside.links] == [handoff.context.span_id]


def test_a_root_ends_when_its_conversation_is_gone(
    telemetry: HandoffTelemetry, spans: Spans, open_spans: OpenSpans
) -> None:
    """A worker that never reports an end (Pipecat's own Flows tests pass a test double): the
    conversation's root ends when the conversation is collected, at its last handoff."""
    conversation = Conversation(telemetry, T0, otel_context.Context())
    conversation.emit(
        start_ns=T0 + MS,
        end_ns=T0 + 3 * MS,
        parent=None,
        sequence=conversation.next_sequence(),
        outcome=sc.OUTCOME_COMPLETED,
    )
    assert [s.name for s in open_spans.ours()] == [sc.SPAN_CHAT]
    del conversation
    gc.collect()
    assert open_spans.ours() == []
    [root] = spans.named(sc.SPAN_CHAT)
    assert root.end_time == T0 + 3 * MS and root.attributes[sc.CHAT_HANDOFFS] == 1


def test_uninstrument_ends_every_open_root(
    provider: TracerProvider, telemetry: HandoffTelemetry, spans: Spans, open_spans: OpenSpans
) -> None:
    pytest.importorskip("pipecat.flows")  # instrumented now, not when the app imports it
    instrumentor = PipecatFlowsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    conversation = Conversation(telemetry, T0, otel_context.Context())
    conversation.emit(
        start_ns=T0,
        end_ns=T0 + MS,
        parent=None,
        sequence=conversation.next_sequence(),
        outcome=sc.OUTCOME_COMPLETED,
    )
    assert open_spans.ours()
    instrumentor.uninstrument()
    assert open_spans.ours() == []
    assert len(spans.named(sc.SPAN_CHAT)) == 1
    del conversation  # its end came already: nothing more
    gc.collect()
    assert len(spans.named(sc.SPAN_CHAT)) == 1


# --- what the caller hears ---------------------------------------------------------------------------
def test_heard_delay_of_a_slower_link_is_what_the_documented_model_gives() -> None:
    """100 ms round trip, 20 ms jitter, Opus at 20 ms a packet: the agent's device frame (10), one
    packet gathered (20), one way (50), the caller's buffer of two packets (40) and NetEq's 95th
    percentile margin, 1.645 * sqrt(pi) / 2 times the jitter (29.2), the caller's device frame (10)."""
    from otel_handoff.core.heard import Downlink, attributes, heard_delay

    slow = Downlink(
        0.100, 0.020, 3, Downlink.packet_seconds("audio/opus", "minptime=10;useinbandfec=1"), "audio/opus"
    )
    assert heard_delay(slow) == pytest.approx(0.1592, abs=1e-4)
    assert attributes(slow)[sc.FIRST_SPEECH_HEARD_DELAY] == pytest.approx(0.1592, abs=1e-4)
    assert attributes(slow)[sc.DOWNLINK_PACKETS_LOST] == 3
    assert sc.FIRST_SPEECH_HEARD_DELAY_MISSING not in attributes(slow)
    # a link that says 40 ms a packet in its SDP; no receiver report yet: no estimate, no made-up value
    assert Downlink.packet_seconds("audio/opus", "minptime=10;ptime=40") == 0.040
    early = Downlink(None, 0.003, 0, 0.020, "audio/opus")
    assert heard_delay(early) is None and sc.FIRST_SPEECH_HEARD_DELAY not in attributes(early)


def test_a_first_speech_without_a_heard_delay_says_why() -> None:
    """No statistics in time, no round trip yet (a receiver's first report can carry none), no
    known codec: the span says which, and keeps what it knows."""
    from otel_handoff.core.heard import Downlink, attributes

    missing = sc.FIRST_SPEECH_HEARD_DELAY_MISSING
    assert attributes(None) == {missing: "no_statistics"}
    early = attributes(Downlink(None, 0.003, 0, 0.020, "audio/opus"))
    assert early[missing] == "no_round_trip" and early[sc.DOWNLINK_JITTER] == 0.003
    assert attributes(Downlink(0.010, 0.0, 0, None, "audio/l16"))[missing] == "unknown_codec"


def test_a_negative_cumulative_loss_is_none_lost() -> None:
    """RFC 3550's cumulative loss is expected less received: duplicates, or packets reordered
    before the first one counted from, make it negative (-1 and -2 on the shaped links of
    tests/test_pipecat_call.py). The span says none were lost."""
    from otel_handoff.core.heard import Downlink, attributes

    assert attributes(Downlink(0.2, 0.015, -2, 0.020, "audio/opus"))[sc.DOWNLINK_PACKETS_LOST] == 0


def test_livekit_statistics_become_a_downlink() -> None:
    pytest.importorskip("livekit.rtc")
    from livekit.rtc._proto import stats_pb2

    from otel_handoff.core.heard import attributes
    from otel_handoff.livekit._downlink import downlink

    report = stats_pb2.RtcStats()
    # the last report's round trip (0.13) strays with the link's jitter both ways: the mean of all
    report.remote_inbound_rtp.remote_inbound.round_trip_time = 0.13
    report.remote_inbound_rtp.remote_inbound.total_round_trip_time = 0.3
    report.remote_inbound_rtp.remote_inbound.round_trip_time_measurements = 3
    report.remote_inbound_rtp.received.jitter = 0.02
    report.remote_inbound_rtp.received.packets_lost = 2
    codec = stats_pb2.RtcStats()
    codec.codec.codec.mime_type = "audio/opus"
    codec.codec.codec.sdp_fmtp_line = "minptime=10;useinbandfec=1"
    link = downlink([codec, report])
    assert (link.round_trip_time, link.jitter, link.packets_lost) == (pytest.approx(0.1), 0.02, 2)
    assert (link.codec, link.packet_duration) == ("audio/opus", 0.020)
    # in an SFU's room the statistics describe the agent's leg to the server: the span says so
    assert attributes(link)[sc.DOWNLINK_LEGS] == ["agent_server"]
    assert sc.CALLER_CONNECTION_QUALITY not in attributes(link)  # no room here: nothing rated
    # before RTCP has measured a round trip (the first seconds of a call): the ICE pair's
    report.remote_inbound_rtp.remote_inbound.round_trip_time_measurements = 0
    pair = stats_pb2.RtcStats()
    pair.candidate_pair.candidate_pair.nominated = True
    pair.candidate_pair.candidate_pair.current_round_trip_time = 0.03
    assert downlink([codec, report, pair]).round_trip_time == 0.03
