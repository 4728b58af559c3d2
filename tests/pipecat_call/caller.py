"""The caller: an aiortc peer in its own process, one call per command.

Run inside the call's network namespace as ``python caller.py OFFER_URL WORKDIR``; it reads one
JSON command per line on stdin (``speech``, ``linger``) and answers each with one JSON
line on stdout once the call is over. One process makes every call of a run.

A call: offer a microphone to the bot (``POST /api/offer``, as Pipecat's clients do), hear the
triage node's greeting to its end, say ``speech`` (espeak-ng), hear the billing node, stay
``linger`` seconds, hang up. Every received frame is timed when a speaker would play it: when aiortc
hands it over, after its jitter buffer, or when the frame before it has played, whichever is later
(aiortc plays nothing itself: a burst after a stall comes out of its buffer at once), and attributed
to a node by its tone. aiortc's audio jitter buffer is its own (``prefetch=4`` packets, fixed): the
caller's buffer is the one thing of the downlink the bot's side cannot know, and the test sets none.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from av import AudioFrame
from livekit_call import tones

SAMPLE_RATE = 48000
FRAME = SAMPLE_RATE // 50  # 20 ms, as a browser's microphone track hands Opus
ENDED_AFTER = 5  # frames (100 ms) without a node's tone: it stopped speaking
EDGE_SECONDS = 0.005  # where in a frame a node's voice stops or starts: told 5 ms at a time
STEP_TIMEOUT = 30.0  # seconds any one step of a call may take before the call is reported failed
FIRST, SECOND = "triage", "billing"


def speech(text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng, as 48 kHz int16 samples."""
    wav = subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True).stdout
    rate = int.from_bytes(wav[24:28], "little")
    samples = np.frombuffer(wav[44:], dtype=np.int16).astype(np.float64)
    times = np.arange(int(samples.size * SAMPLE_RATE / rate)) / SAMPLE_RATE
    return np.interp(times, np.arange(samples.size) / rate, samples).astype(np.int16)


class Microphone(MediaStreamTrack):
    """20 ms frames in real time: queued speech, else silence."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._samples = np.zeros(0, dtype=np.int16)
        self._last_voiced: int | None = None  # sample index of the speech's last voiced sample
        self._said: asyncio.Future[int] | None = None
        self._start: float | None = None
        self._pts = 0

    def say(self, samples: np.ndarray) -> asyncio.Future[int]:
        """Speak ``samples``; the future is the time its last voiced sample leaves the caller."""
        voiced = np.flatnonzero(np.abs(samples) > 0.01 * 32767)
        self._last_voiced = int(voiced[-1]) if voiced.size else samples.size - 1
        self._samples = samples
        self._said = asyncio.get_running_loop().create_future()
        return self._said

    async def recv(self) -> AudioFrame:
        if self._start is None:
            self._start = time.monotonic()
        wait = self._start + self._pts / SAMPLE_RATE - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)  # the microphone's clock: one frame per 20 ms
        chunk = self._samples[:FRAME]
        self._samples = self._samples[FRAME:]
        if self._last_voiced is not None:
            if self._last_voiced < FRAME and self._said is not None and not self._said.done():
                # handed to the encoder now, less the rest of the frame after the voiced sample
                rest = (FRAME - 1 - self._last_voiced) / SAMPLE_RATE
                self._said.set_result(time.time_ns() - int(rest * 1e9))
                self._last_voiced = None
            elif self._last_voiced is not None:
                self._last_voiced -= FRAME
        chunk = np.pad(chunk, (0, FRAME - chunk.size))
        frame = AudioFrame.from_ndarray(chunk[None, :], format="s16", layout="mono")
        frame.sample_rate = SAMPLE_RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, SAMPLE_RATE)
        self._pts += FRAME
        return frame


@dataclass
class Ears:
    """Every frame heard from the bot, and when each node started and stopped being heard."""

    frames: list[tuple[Any, ...]] = field(default_factory=list)
    first: dict[str, int] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)
    # per node first heard: where in its first frame its voice starts (5 ms at a time), and where the
    # voice heard before it had stopped
    onset: dict[str, int] = field(default_factory=dict)
    previous_ended: dict[str, int] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    gone: bool = False

    async def listen(self, track: MediaStreamTrack) -> None:
        quiet: dict[str, int] = {}
        played_until = 0  # when the frames handed over so far have all been played
        voiced_until: dict[str, int] = {}  # per node, where its voice last stopped
        while True:
            try:
                frame = await track.recv()
            except Exception:  # MediaStreamError: the bot's track ended
                self.gone = True
                self.changed.set()
                return
            # a speaker plays frames in turn: one handed over while an earlier one still plays (a
            # burst after a stall, which aiortc's buffer passes on at once) is heard after it
            now = max(time.time_ns(), played_until)
            played_until = now + round(frame.samples * 1e9 / frame.sample_rate)
            samples = frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0]
            voice = tones.whose(samples, frame.sample_rate)
            self.frames.append((now, voice))
            edge = round(EDGE_SECONDS * frame.sample_rate)
            blocks = [
                tones.whose(samples[i : i + edge], frame.sample_rate) for i in range(0, len(samples), edge)
            ]
            if voice is not None and voice not in self.first:
                self.first[voice] = now
                at = blocks.index(voice) if voice in blocks else 0
                self.onset[voice] = now + round(at * EDGE_SECONDS * 1e9)
                before = [ns for node, ns in voiced_until.items() if node != voice]
                if before:
                    self.previous_ended[voice] = max(before)
            for i, block in enumerate(blocks):
                if block is not None:
                    voiced_until[block] = now + round((i + 1) * EDGE_SECONDS * 1e9)
            for node in self.first:
                if node in self.ended:
                    continue
                quiet[node] = 0 if voice == node else quiet.get(node, 0) + 1
                if quiet[node] >= ENDED_AFTER:
                    self.ended[node] = now
            self.changed.set()

    async def until(self, what: str, condition: Any) -> None:
        """Wait until ``condition()`` (or the bot left); fail naming ``what`` at the deadline."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while not (condition() or self.gone):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {what} within {STEP_TIMEOUT:.0f} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        if not condition():
            raise RuntimeError(f"the bot left before {what}")


async def _offer(url: str, pc: RTCPeerConnection) -> dict[str, Any]:
    body = json.dumps({"sdp": pc.localDescription.sdp, "type": pc.localDescription.type}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})

    def post() -> dict[str, Any]:
        with urllib.request.urlopen(request, timeout=STEP_TIMEOUT) as response:
            return json.loads(response.read())

    return await asyncio.to_thread(post)


async def inbound(pc: RTCPeerConnection) -> dict[str, Any]:
    """The receiver's view of the bot's audio: its jitter and loss (RTCInboundRtpStreamStats)."""
    for receiver in pc.getReceivers():
        if receiver.track is not None and receiver.track.kind == "audio":
            for stats in (await receiver.getStats()).values():
                if stats.type == "inbound-rtp":
                    return {"jitter": stats.jitter, "packets_lost": stats.packetsLost}
    return {}


async def call(url: str, workdir: Path, command: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"command": command}
    pc = RTCPeerConnection()
    ears = Ears()
    listening: list[asyncio.Task[None]] = []
    microphone = Microphone()
    samples = speech(command["speech"])

    @pc.on("track")
    def _track(track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            listening.append(asyncio.create_task(ears.listen(track)))

    try:
        pc.addTransceiver(microphone, direction="sendrecv")
        await pc.setLocalDescription(await pc.createOffer())
        answer = await _offer(url, pc)
        result["pc_id"] = answer["pc_id"]
        await pc.setRemoteDescription(RTCSessionDescription(answer["sdp"], answer["type"]))
        await ears.until(f"{FIRST}'s greeting to end", lambda: FIRST in ears.ended)
        result["speech_started_ns"] = time.time_ns()
        result["end_of_speech_ns"] = await asyncio.wait_for(microphone.say(samples), STEP_TIMEOUT)
        await ears.until(f"{SECOND}'s voice", lambda: SECOND in ears.first)
        result["inbound_at_first_heard"] = await inbound(pc)
        await ears.until(f"{SECOND}'s reply to end", lambda: SECOND in ears.ended)
        await asyncio.sleep(command.get("linger", 0.0))  # the caller stays on the line a while
    except Exception as exc:  # reported to the test, which fails the call with it
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        result["left_ns"] = time.time_ns()
        await pc.close()
        for task in listening:
            task.cancel()
        await asyncio.gather(*listening, return_exceptions=True)
    result["first_heard_ns"] = ears.first
    result["ended_ns"] = ears.ended
    result["onset_ns"] = ears.onset
    result["previous_ended_ns"] = ears.previous_ended
    (workdir / f"frames-{result.get('pc_id', 'failed')}.json").write_text(json.dumps(ears.frames))
    return result


async def main(url: str, workdir: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(json.dumps({"ready": True}), flush=True)
    while line := await reader.readline():
        print(json.dumps(await call(url, Path(workdir), json.loads(line))), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
