"""The agent's published audio in a LiveKit room, and what WebRTC reports of its way to the caller.

Read once per handoff, when the new agent first speaks: the statistics of the room's published
audio track (its RTCP receiver reports, its codec) become a :class:`~otel_handoff.core.heard.Downlink`.
Outside a job (an offline session, a console run) there is no room: nothing is read.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ..core import schema as sc
from ..core.heard import Downlink

STATS_TIMEOUT_SECONDS = 1.0  # the first_speech span waits at most this long for them


def published_audio_track() -> Any | None:
    """The audio track the job's room publishes (the agent's voice), or None outside a job."""
    try:
        from livekit.agents import get_job_context

        room = get_job_context().room
    except (ImportError, RuntimeError):  # no job: nothing is published anywhere
        return None
    from livekit import rtc

    for publication in room.local_participant.track_publications.values():
        if publication.kind == rtc.TrackKind.KIND_AUDIO and publication.track is not None:
            return publication.track
    return None


async def read_downlink(track: Any) -> Downlink | None:
    """The track's statistics as a :class:`Downlink`, or None when none came in time."""
    try:
        stats = await asyncio.wait_for(track.get_stats(), STATS_TIMEOUT_SECONDS)
    except asyncio.TimeoutError:
        return None
    return dataclasses.replace(downlink(stats), caller_quality=caller_quality())


def caller_quality() -> str | None:
    """What the server tells the agent of the caller's own leg: its rating of the caller's
    connection (``connection_quality``: excellent, good, poor, lost), when the room has one caller
    (one remote participant that is not an agent). The server rates it from the caller's own
    statistics; it sends no round trip or jitter of that leg to other participants."""
    try:
        from livekit.agents import get_job_context

        room = get_job_context().room
    except (ImportError, RuntimeError):
        return None
    from livekit import rtc

    agent = getattr(rtc.ParticipantKind, "PARTICIPANT_KIND_AGENT", None)
    callers = [p for p in room.remote_participants.values() if getattr(p, "kind", None) != agent]
    quality = getattr(callers[0], "connection_quality", None) if len(callers) == 1 else None
    name = getattr(quality, "name", None)
    if not isinstance(name, str) or not name.startswith("QUALITY_") or name == "QUALITY_UNKNOWN":
        return None
    return name.removeprefix("QUALITY_").lower()


def downlink(stats: Any) -> Downlink:
    """A :class:`Downlink` from livekit-rtc's ``RtcStats`` list: the receiver's reports of the
    published track (``remote_inbound_rtp``), its ``codec``; the round trip from RTCP once it has
    measured one, else from the connection's ICE pair (measured when the call connected).

    The round trip is the mean of RTCP's measurements so far (``totalRoundTripTime`` over
    ``roundTripTimeMeasurements``), not the last: one report's round trip is two one-way delays,
    each varying by the link's jitter, so it strays twice as far from the mean path as one packet
    does (aiortc's, Pipecat's, is smoothed already)."""
    rtt = ice_rtt = jitter = lost = None
    codec = fmtp = None
    for item in stats:
        kind = item.WhichOneof("stats")
        if kind == "remote_inbound_rtp":
            report = item.remote_inbound_rtp
            measured = report.remote_inbound.round_trip_time_measurements
            if measured:
                rtt = report.remote_inbound.total_round_trip_time / measured
            if report.received.HasField("jitter"):
                jitter = report.received.jitter
            if report.received.HasField("packets_lost"):
                lost = report.received.packets_lost
        elif kind == "codec" and item.codec.codec.mime_type.lower().startswith("audio/"):
            codec, fmtp = item.codec.codec.mime_type.lower(), item.codec.codec.sdp_fmtp_line
        elif kind == "candidate_pair" and item.candidate_pair.candidate_pair.nominated:
            pair = item.candidate_pair.candidate_pair
            if pair.HasField("current_round_trip_time"):
                ice_rtt = pair.current_round_trip_time
    # an SFU's room: the statistics describe the agent's leg to the server, not the caller's
    return Downlink(
        rtt if rtt is not None else ice_rtt,
        jitter,
        lost,
        Downlink.packet_seconds(codec, fmtp),
        codec,
        (sc.LEG_AGENT_SERVER,),
    )
