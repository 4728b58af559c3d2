"""The bot's audio on a ``SmallWebRTCTransport`` (aiortc, peer to peer), and what WebRTC reports of
its way to the caller.

Read once per transition, when the bot first speaks in the new node: the statistics of the peer
connection's audio sender (its RTCP receiver reports: round-trip time, jitter, loss) and the
negotiated codec become a :class:`~otel_handoff.core.heard.Downlink`, the model every framework
shares. A pipeline without that transport (Daily, a websocket, an offline run) has nothing read.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from ..core.heard import Downlink

STATS_TIMEOUT_SECONDS = 1.0  # the first_speech span waits at most this long for them
_TRANSPORT = "pipecat.transports.smallwebrtc.transport"


def audio_sender(worker: Any) -> tuple[Any, Any] | None:
    """The aiortc ``RTCRtpSender`` of the bot's voice and its ``RTCPeerConnection``, when the
    worker's pipeline outputs to a ``SmallWebRTCTransport``; else None. Walks the pipeline once
    (never a frame)."""
    module = sys.modules.get(_TRANSPORT)
    output = getattr(module, "SmallWebRTCOutputTransport", None)
    if output is None:  # the transport was never imported: nothing of it runs
        return None
    for processor in processors(getattr(worker, "pipeline", None)):
        if isinstance(processor, output):
            connection = getattr(getattr(processor, "_client", None), "_webrtc_connection", None)
            pc = getattr(connection, "_pc", None)
            for sender in pc.getSenders() if pc is not None else ():
                if getattr(sender, "kind", None) == "audio":
                    return sender, pc
    return None


def processors(processor: Any, depth: int = 0) -> Any:
    if processor is None or depth > 16:
        return
    yield processor
    for child in getattr(processor, "processors", None) or ():
        yield from processors(child, depth + 1)


async def read_downlink(sender: Any, pc: Any) -> Downlink | None:
    """The sender's statistics as a :class:`Downlink`, or None when none came in time."""
    try:
        report = await asyncio.wait_for(sender.getStats(), STATS_TIMEOUT_SECONDS)
    except asyncio.TimeoutError:
        return None
    return downlink(report.values(), *sent_codec(pc))


def sent_codec(pc: Any) -> tuple[str | None, int | None, str | None]:
    """The codec aiortc sends audio with (the first of the audio section of the connection's local
    description, the answer the bot gave): MIME type, clock rate; no fmtp ``ptime`` (aiortc's
    encoders packetise at the codec's default, 20 ms for Opus)."""
    from aiortc.sdp import SessionDescription

    local = getattr(pc, "localDescription", None)
    if local is None:
        return None, None, None
    for media in SessionDescription.parse(local.sdp).media:
        if media.kind == "audio" and media.rtp.codecs:
            codec = media.rtp.codecs[0]
            return codec.mimeType.lower(), codec.clockRate, None
    return None, None, None


def downlink(stats: Any, codec: str | None, clock_rate: int | None, fmtp: str | None) -> Downlink:
    """A :class:`Downlink` from aiortc's stats of an audio sender: its ``remote-inbound-rtp``, the
    last RTCP receiver report (``roundTripTime`` in seconds once measured; ``jitter`` in RTP
    timestamp units, converted with the codec's clock rate). aiortc measures no ICE round trip:
    before the first report the round trip is unknown, and so is the heard delay."""
    rtt = jitter = lost = None
    for item in stats:
        if getattr(item, "type", None) == "remote-inbound-rtp":
            rtt = item.roundTripTime
            if item.jitter is not None and clock_rate:
                jitter = item.jitter / clock_rate
            lost = item.packetsLost
    return Downlink(rtt, jitter, lost, Downlink.packet_seconds(codec, fmtp), codec)
