"""What the caller hears: from the agent's first audio frame of a new agent to the caller's ear.

A trace ends ``first_speech`` where the agent captures its first audio frame into the call. The
caller hears it later, after the audio is packetised, crosses the network and waits in the
caller's jitter buffer. The agent's side of a WebRTC connection knows part of that from its own
statistics (RTCP receiver reports: round-trip time, jitter, loss; the codec's packet framing), so
every framework with a WebRTC transport reports the same :class:`Downlink` and gets the same
estimate, :func:`heard_delay`. The model and where it is wrong: ``docs/livekit.md``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from . import schema as sc

# RFC 7587: an Opus RTP packet carries 20 ms unless the SDP's ptime says otherwise
_DEFAULT_PACKET_SECONDS = {"audio/opus": 0.020, "audio/pcmu": 0.020, "audio/pcma": 0.020, "audio/g722": 0.020}
_PTIME = re.compile(r"(?:^|;)\s*ptime=(\d+)")
# WebRTC moves audio in 10 ms frames at both ends: the sender's device captures one, the
# receiver's plays one out (libwebrtc's fixed audio frame, not a property of the link)
_DEVICE_FRAME_SECONDS = 0.010
# the receiver's jitter buffer: a packet being received and one in hand before playout starts
# (libwebrtc's NetEq at low jitter), plus what it holds for the network's jitter: NetEq aims its
# delay at the 95th percentile of the packets' arrival delay (DelayManager's quantile 0.95), 1.645
# standard deviations above the mean delay for a normally varying one; the jitter a receiver reports
# (RFC 3550) is the mean difference between consecutive packets' transit times, 2/sqrt(pi) standard
# deviations for independent ones. So the margin is 1.645 * sqrt(pi) / 2 = 1.46 times that jitter.
_BUFFERED_PACKETS = 2
_JITTER_MARGIN = 1.645 * math.sqrt(math.pi) / 2
# why a first speech has no heard delay (agent_handoff.first_speech.heard_delay_missing)
NO_STATISTICS = "no_statistics"  # the transport's statistics did not come in time
NO_ROUND_TRIP = "no_round_trip"  # no receiver report with a round trip yet, no ICE pair's either
UNKNOWN_CODEC = "unknown_codec"  # the packet time is not known


@dataclass(frozen=True)
class Downlink:
    """What the agent's side reports of the way its audio takes to the caller."""

    # seconds: RTCP receiver reports' (their mean, or aiortc's smoothed), else the ICE pair's; None: unknown
    round_trip_time: float | None
    jitter: float | None  # seconds, interarrival jitter the receiver reports
    packets_lost: int | None
    packet_duration: float | None  # seconds of audio per RTP packet
    codec: str | None  # its MIME type, e.g. audio/opus
    legs: tuple[str, ...] = ()  # which legs of the way the statistics describe (schema.LEG_*)
    caller_quality: str | None = None  # an SFU's rating of the caller's own connection

    @staticmethod
    def packet_seconds(codec: str | None, sdp_fmtp_line: str | None) -> float | None:
        """Audio per packet: the SDP's ``ptime`` where it says, else the codec's RTP default."""
        found = _PTIME.search(sdp_fmtp_line or "")
        if found:
            return int(found.group(1)) / 1000
        return _DEFAULT_PACKET_SECONDS.get((codec or "").lower())


def heard_delay(link: Downlink) -> float | None:
    """Seconds from the agent's capture of a frame to the caller hearing it, or None when the
    statistics do not say enough (no receiver report yet, an unknown codec).

    The agent's device frame (10 ms) is captured; one packet's worth of audio is gathered before
    it is sent; the network takes half the round trip one way; the caller's jitter buffer holds
    two packets plus 1.46 times the jitter (NetEq's 95th percentile); the caller's device plays a
    10 ms frame out.
    """
    packet, rtt = link.packet_duration, link.round_trip_time
    if packet is None or rtt is None:
        return None
    buffered = _BUFFERED_PACKETS * packet + _JITTER_MARGIN * (link.jitter or 0.0)
    return _DEVICE_FRAME_SECONDS + packet + rtt / 2 + buffered + _DEVICE_FRAME_SECONDS


def missing(link: Downlink | None) -> str | None:
    """Why :func:`heard_delay` gives no estimate for ``link`` (None: it gives one)."""
    if link is None:
        return NO_STATISTICS
    if link.round_trip_time is None:
        return NO_ROUND_TRIP
    if link.packet_duration is None:
        return UNKNOWN_CODEC
    return None


def attributes(link: Downlink | None) -> dict[str, Any]:
    """The ``first_speech`` span's attributes of the downlink (what is known of it), and why
    there is no heard delay when there is none. A receiver's cumulative loss (RFC 3550) goes
    below zero when it received more than it expected (duplicates, or reordered packets before the
    first it counted from): that is none lost."""
    found: dict[str, Any] = {}
    if link is None:
        return {sc.FIRST_SPEECH_HEARD_DELAY_MISSING: NO_STATISTICS}
    lost = None if link.packets_lost is None else max(0, link.packets_lost)
    for key, value in (
        (sc.DOWNLINK_ROUND_TRIP_TIME, link.round_trip_time),
        (sc.DOWNLINK_JITTER, link.jitter),
        (sc.DOWNLINK_PACKETS_LOST, lost),
        (sc.DOWNLINK_PACKET_DURATION, link.packet_duration),
        (sc.DOWNLINK_CODEC, link.codec),
        (sc.DOWNLINK_LEGS, list(link.legs) or None),
        (sc.CALLER_CONNECTION_QUALITY, link.caller_quality),
        (sc.FIRST_SPEECH_HEARD_DELAY, heard_delay(link)),
        (sc.FIRST_SPEECH_HEARD_DELAY_MISSING, missing(link)),
    ):
        if value is not None:
            found[key] = value
    return found
