"""The caller: a ``livekit.rtc`` participant in its own process, one call per command.

Run inside the call's network namespace as ``python caller.py URL API_KEY API_SECRET AGENT_NAME
WORKDIR``; it reads one JSON command per line on stdin (``room``, ``speech``, ``linger``) and
answers each with one JSON line on stdout once the call is over. One process makes every call
of a run, each as a new participant in a new room, so a call costs no interpreter start.

A call: join with a token whose room configuration dispatches the agent, publish a microphone
(10 ms frames, silence between words, as a real microphone sends), hear the first agent's
greeting to its end, say ``speech`` (espeak-ng), hear the second agent, stay ``linger`` seconds,
hang up. Every received frame is timed when the SDK hands it over, after WebRTC's jitter buffer
(when a speaker would play it), on the stream's own timeline (:mod:`timeline`: a frame this
process read late on a busy machine was there on time), and attributed to an agent by its tone;
the frames (time, whose, each tone's level) go to ``WORKDIR/frames-<room>.json``. Times are
wall-clock nanoseconds, comparable with the worker's (same machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tones
from google.protobuf.json_format import MessageToDict
from livekit import api, rtc
from timeline import Timeline

SAMPLE_RATE = 48000
FRAME = SAMPLE_RATE // 100  # 10 ms
ENDED_AFTER = 10  # frames (100 ms) without an agent's tone: it stopped speaking
STEP_TIMEOUT = 30.0  # seconds any one step of a call may take before the call is reported failed
FIRST, SECOND = "triage", "billing"


def speech(text: str) -> np.ndarray:
    """``text`` spoken by espeak-ng, as 48 kHz int16 samples."""
    wav = subprocess.run(["espeak-ng", "--stdout", text], check=True, capture_output=True).stdout
    rate = int.from_bytes(wav[24:28], "little")
    samples = np.frombuffer(wav[44:], dtype=np.int16).astype(np.float64)
    times = np.arange(int(samples.size * SAMPLE_RATE / rate)) / SAMPLE_RATE
    return np.interp(times, np.arange(samples.size) / rate, samples).astype(np.int16)


class Microphone:
    """Sends 10 ms frames without a pause: queued speech, else silence."""

    def __init__(self, source: rtc.AudioSource) -> None:
        self.source = source
        self._speech: np.ndarray | None = None
        self._said: asyncio.Future[int] | None = None
        self._task = asyncio.create_task(self._run())

    def say(self, samples: np.ndarray) -> asyncio.Future[int]:
        """Speak ``samples``; the future is the time the last voiced sample leaves the caller."""
        self._speech = samples
        self._said = asyncio.get_running_loop().create_future()
        return self._said

    async def _run(self) -> None:
        silence = rtc.AudioFrame(bytes(FRAME * 2), SAMPLE_RATE, 1, FRAME)
        while True:
            samples, said = self._speech, self._said
            self._speech = None
            if samples is None:
                await self.source.capture_frame(silence)
                continue
            voiced = np.flatnonzero(np.abs(samples) > 0.01 * 32767)
            last = int(voiced[-1]) if voiced.size else samples.size - 1
            for start in range(0, samples.size, FRAME):
                chunk = samples[start : start + FRAME]
                chunk = np.pad(chunk, (0, FRAME - chunk.size))
                await self.source.capture_frame(rtc.AudioFrame(chunk.tobytes(), SAMPLE_RATE, 1, FRAME))
                if start <= last < start + FRAME and said is not None:
                    # it leaves once the queue ahead of it has played, less the frame after it
                    left = self.source.queued_duration - (start + FRAME - 1 - last) / SAMPLE_RATE
                    said.set_result(time.time_ns() + int(left * 1e9))

    async def aclose(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass
class Ears:
    """Every frame heard from the agent, and when each agent started and stopped being heard."""

    frames: list[tuple[Any, ...]] = field(default_factory=list)  # time, whose, each tone's level
    first: dict[str, int] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    track: rtc.RemoteAudioTrack | None = None
    gone: bool = False

    async def listen(self, track: rtc.RemoteAudioTrack) -> None:
        self.track = track
        stream = rtc.AudioStream(track, sample_rate=SAMPLE_RATE, num_channels=1)
        quiet: dict[str, int] = {}
        timeline = Timeline()
        try:
            async for event in stream:
                count, rate = event.frame.samples_per_channel, event.frame.sample_rate
                now = round((timeline.add(count, rate) + count / rate) * 1e9)  # handed over on time
                samples = np.frombuffer(event.frame.data, dtype=np.int16)
                voice = tones.whose(samples, SAMPLE_RATE)
                level = tones.levels(samples, SAMPLE_RATE)
                self.frames.append((now, voice, *(round(level[agent], 4) for agent in tones.TONES)))
                if voice is not None and voice not in self.first:
                    self.first[voice] = now
                for agent in self.first:
                    if agent in self.ended:
                        continue
                    quiet[agent] = 0 if voice == agent else quiet.get(agent, 0) + 1
                    if quiet[agent] >= ENDED_AFTER:
                        self.ended[agent] = now
                self.changed.set()
        finally:
            await stream.aclose()

    async def until(self, what: str, condition: Any) -> None:
        """Wait until ``condition()``, or the agent left; fail naming ``what`` at the deadline."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while not (condition() or self.gone):
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {what} within {STEP_TIMEOUT:.0f} s")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


async def inbound_stats(track: rtc.RemoteAudioTrack | None) -> dict[str, Any]:
    """The jitter buffer and loss of the agent's audio as this caller receives it (inbound-rtp)."""
    if track is None:
        return {}
    for stats in await track.get_stats():
        if stats.WhichOneof("stats") == "inbound_rtp":
            found = MessageToDict(stats.inbound_rtp, preserving_proto_field_name=True)
            inbound, received = found.get("inbound", {}), found.get("received", {})
            emitted = int(inbound.get("jitter_buffer_emitted_count", 0))
            return {
                "jitter_buffer_delay_s": inbound.get("jitter_buffer_delay"),
                "jitter_buffer_emitted_count": emitted,
                "jitter_buffer_mean_s": inbound.get("jitter_buffer_delay", 0) / emitted if emitted else None,
                "jitter_buffer_target_delay_s": inbound.get("jitter_buffer_target_delay"),
                "jitter_buffer_minimum_delay_s": inbound.get("jitter_buffer_minimum_delay"),
                "jitter_s": received.get("jitter"),
                "packets_lost": received.get("packets_lost"),
                "packets_received": received.get("packets_received"),
            }
    return {}


async def call(
    url: str, key: str, secret: str, agent_name: str, workdir: Path, command: dict[str, Any]
) -> dict:
    room_name = command["room"]
    token = (
        api.AccessToken(key, secret)
        .with_identity(f"caller-{room_name}")
        .with_grants(api.VideoGrants(room_join=True, room=room_name))
        .with_room_config(api.RoomConfiguration(agents=[api.RoomAgentDispatch(agent_name=agent_name)]))
        .to_jwt()
    )
    result: dict[str, Any] = {"room": room_name}
    room = rtc.Room()
    ears = Ears()
    listening: list[asyncio.Task[None]] = []

    @room.on("track_subscribed")
    def _subscribed(track: rtc.Track, *_: Any) -> None:
        if isinstance(track, rtc.RemoteAudioTrack):
            listening.append(asyncio.create_task(ears.listen(track)))

    @room.on("participant_disconnected")
    def _agent_left(*_: Any) -> None:
        ears.gone = True
        result["agent_left_ns"] = time.time_ns()
        ears.changed.set()

    samples = speech(command["speech"])
    microphone: Microphone | None = None
    try:
        await room.connect(url, token)
        result["joined_ns"] = time.time_ns()
        result["room_sid"] = await room.sid
        source = rtc.AudioSource(SAMPLE_RATE, 1, queue_size_ms=50)
        track = rtc.LocalAudioTrack.create_audio_track("microphone", source)
        options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
        await room.local_participant.publish_track(track, options)
        microphone = Microphone(source)

        await ears.until(f"{FIRST}'s greeting to end", lambda: FIRST in ears.ended)
        result["speech_started_ns"] = time.time_ns()
        result["end_of_speech_ns"] = await asyncio.wait_for(microphone.say(samples), STEP_TIMEOUT)
        await ears.until(f"{SECOND}'s voice", lambda: SECOND in ears.first)
        result["stats_at_first_heard"] = await inbound_stats(ears.track)
        await ears.until(f"{SECOND}'s reply to end", lambda: SECOND in ears.ended)
        await asyncio.sleep(command.get("linger", 0.0))  # the caller stays on the line a while
        result["inbound"] = await inbound_stats(ears.track)
    except Exception as exc:  # reported to the test, which fails the call with it
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if microphone is not None:
            await microphone.aclose()
        result["left_ns"] = time.time_ns()
        await room.disconnect()
        for task in listening:
            task.cancel()
        await asyncio.gather(*listening, return_exceptions=True)
    result["first_heard_ns"] = ears.first
    result["ended_ns"] = ears.ended
    (workdir / f"frames-{room_name}.json").write_text(json.dumps(ears.frames))
    return result


async def main(url: str, key: str, secret: str, agent_name: str, workdir: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print(json.dumps({"ready": True}), flush=True)
    while line := await reader.readline():
        result = await call(url, key, secret, agent_name, Path(workdir), json.loads(line))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
