"""The bot's audio on a ``SmallWebRTCTransport`` (aiortc, peer to peer), and what WebRTC reports of
its way to the caller.

Read once per handoff (a Flows transition, a worker handoff), when the bot first speaks after it:
the statistics of the peer connection's audio sender (its RTCP receiver reports: round-trip time,
jitter, loss) and the negotiated codec become a :class:`~otel_handoff.core.heard.Downlink`, the
model every framework shares. A pipeline without that transport (Daily, a websocket, an offline
run) has nothing read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
import weakref
from typing import Any

from ..core import schema as sc
from ..core.emit import Emitted, emit_linked
from ..core.faults import guard, report
from ..core.heard import Downlink
from ..core.heard import attributes as downlink_attributes
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

STATS_TIMEOUT_SECONDS = 1.0  # the first_speech span waits at most this long for them
ICE_TIMEOUT_SECONDS = 1.0  # and at most this long more for the ICE pair's round trip
_TRANSPORT = "pipecat.transports.smallwebrtc.transport"


# output transport (a processor) -> when its media sender last started (its first write) or ended
# (its last audio written) a run of the bot's speech: noted by the Flows part's wrappers of
# ``MediaSender._bot_started_speaking`` and ``_bot_stopped_speaking``, once a run
_SPEECH_STARTED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_SPEECH_STOPPED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def note_speech_started(media_sender: Any, now_ns: int) -> None:
    _SPEECH_STARTED[media_sender._transport] = now_ns


def note_speech_stopped(media_sender: Any, now_ns: int) -> None:
    _SPEECH_STOPPED[media_sender._transport] = now_ns


def speech_started_ns(worker: Any) -> int | None:
    """When an output transport of the worker's pipeline last started a run of speech, if known."""
    return _latest(_SPEECH_STARTED, worker)


def speech_stopped_ns(worker: Any) -> int | None:
    """When an output transport of the worker's pipeline last ended a run of speech, if known."""
    return _latest(_SPEECH_STOPPED, worker)


def _latest(marks: weakref.WeakKeyDictionary[Any, int], worker: Any) -> int | None:
    if worker is None or not marks:
        return None
    found = [marks.get(p) for p in processors(getattr(worker, "pipeline", None))]
    return max((ns for ns in found if ns is not None), default=None)


# first speech spans waiting for their transport's statistics (a task nobody holds can vanish)
_READING: set[asyncio.Task[None]] = set()


def emit_first_speech(telemetry: HandoffTelemetry, emitted: Emitted, phase: PhaseRecord, worker: Any) -> None:
    """The handoff's ``first_speech``, linked to it: at once, or, where ``worker``'s pipeline outputs
    to a WebRTC transport, with what the caller hears, its statistics read in a task off the audio
    path (at most :data:`STATS_TIMEOUT_SECONDS`, then :data:`ICE_TIMEOUT_SECONDS`, later)."""
    found = audio_sender(worker) if worker is not None else None
    if found is None:
        emit_linked(telemetry, emitted, phase)
        return
    task = asyncio.get_running_loop().create_task(
        _with_downlink(telemetry, emitted, phase, *found), name="otel_handoff_first_speech"
    )
    _READING.add(task)
    task.add_done_callback(_READING.discard)


async def _with_downlink(
    telemetry: HandoffTelemetry, emitted: Emitted, phase: PhaseRecord, sender: Any, pc: Any
) -> None:
    try:
        phase.attributes = downlink_attributes(await read_downlink(sender, pc))
    except Exception as exc:  # the span goes without them
        report("first speech statistics", exc)
    finally:
        guard("first speech", emit_linked, telemetry, emitted, phase)


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
    """The sender's statistics as a :class:`Downlink`, or None when none came in time; without a
    round trip from RTCP yet, the ICE pair's (:func:`ice_round_trip`)."""
    try:
        report = await asyncio.wait_for(sender.getStats(), STATS_TIMEOUT_SECONDS)
    except asyncio.TimeoutError:
        return None
    link = downlink(report.values(), *sent_codec(pc))
    if link.round_trip_time is None:
        link = dataclasses.replace(link, round_trip_time=await ice_round_trip(sender))
    return link


async def ice_round_trip(sender: Any) -> float | None:
    """The round trip of the connection's nominated ICE pair: one consent check timed (RFC 7675's
    STUN binding request, the one aioice sends on that pair every 5 s itself), or None.

    aiortc measures a round trip from a receiver report only when it answers the last sender
    report aiortc sent; a browser reports every 5 s or so, and on a slow link its report often
    answers an earlier one: a handoff in a call's first seconds, or on a 200 ms link most calls
    of the test, had none. A browser measures the ICE pair's round trip the same way (STUN)."""
    connection = getattr(getattr(getattr(sender, "transport", None), "transport", None), "_connection", None)
    nominated = getattr(connection, "_nominated", None)
    password = getattr(connection, "remote_password", None)
    pair = next(iter(nominated.values()), None) if isinstance(nominated, dict) else None
    if pair is None or password is None:
        return None
    request = connection.build_request(pair, nominate=False)
    started = time.monotonic()
    check = asyncio.ensure_future(
        pair.protocol.request(
            request, pair.remote_addr, integrity_key=password.encode("utf8"), retransmissions=0
        )
    )
    # not wait_for: it would wait on for the request to wind down when cancelled; the span does not
    done, _ = await asyncio.wait({check}, timeout=ICE_TIMEOUT_SECONDS)
    if not done:
        check.cancel()
        return None
    if check.exception() is not None:  # TransactionError: no answer, or the connection closed
        return None
    return time.monotonic() - started


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
    timestamp units, converted with the codec's clock rate). Before a report with a round trip,
    it is unknown here (:func:`read_downlink` then asks the ICE pair)."""
    rtt = jitter = lost = None
    for item in stats:
        if getattr(item, "type", None) == "remote-inbound-rtp":
            rtt = item.roundTripTime
            if item.jitter is not None and clock_rate:
                jitter = item.jitter / clock_rate
            lost = item.packetsLost
    # peer to peer: the bot's statistics describe the whole way to the caller
    return Downlink(rtt, jitter, lost, Downlink.packet_seconds(codec, fmtp), codec, (sc.LEG_AGENT_CALLER,))
