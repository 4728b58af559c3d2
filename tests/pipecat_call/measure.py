"""The test's instruments inside the bot's process: measurements, not tracing.

``bot.py`` calls :func:`install` when ``PIPECAT_CALL_MEASUREMENTS`` names a file; the process then
appends JSON lines to it:

- ``first_frame``, per node a call's output first speaks in: the wall-clock time
  (``time.time_ns()``) its first audio frame was written to the transport
  (``SmallWebRTCClient.write_audio_frame``, called), which node (its tone) and the call's peer
  connection id (the bot's conversation id); with ``previous``, the node heard before it, and
  ``previous_ended_ns``, when the transport had taken that node's last frame (its write returned:
  the track had sent it);
- ``transcribed``, per transcript the scripted STT pushes: when (``time_ns``) and when the caller's
  voice stopped reaching it (``quiet_since_ns``), the start of its endpointing wait.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from typing import Any

import numpy as np
import scripted
from livekit_call import tones
from pipecat.frames.frames import TranscriptionFrame
from pipecat.transports.smallwebrtc.transport import SmallWebRTCClient

_last_voice: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# when the transport had taken the last frame with a node's voice (its write returned)
_last_sent: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def record(event: str, **fields: Any) -> None:
    """One JSON line, appended in one write."""
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}, separators=(",", ":")) + "\n"
    fd = os.open(os.environ["PIPECAT_CALL_MEASUREMENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def install() -> None:
    write_audio_frame = SmallWebRTCClient.write_audio_frame

    async def measured_write_audio_frame(self: SmallWebRTCClient, frame: Any) -> bool:
        now = time.time_ns()
        voice = None
        try:
            voice = tones.whose(np.frombuffer(frame.audio, dtype=np.int16), frame.sample_rate)
            previous = _last_voice.get(self)
            if voice is not None and previous != voice:
                _last_voice[self] = voice
                record(
                    "first_frame",
                    call=self._webrtc_connection.pc_id,
                    agent=voice,
                    time_ns=now,
                    previous=previous,
                    previous_ended_ns=_last_sent.get(self),
                )
        except Exception as exc:  # an instrument must not change the call; the test sees this line
            record("measure_error", error=repr(exc))
        written = await write_audio_frame(self, frame)
        if voice is not None:
            _last_sent[self] = time.time_ns()
        return written

    SmallWebRTCClient.write_audio_frame = measured_write_audio_frame  # type: ignore[method-assign]

    push_frame = scripted.EndpointingSTT.push_frame

    async def measured_push_frame(
        self: scripted.EndpointingSTT, frame: Any, *args: Any, **kwargs: Any
    ) -> None:
        if isinstance(frame, TranscriptionFrame):
            record("transcribed", time_ns=time.time_ns(), quiet_since_ns=self.quiet_since_ns)
        await push_frame(self, frame, *args, **kwargs)

    scripted.EndpointingSTT.push_frame = measured_push_frame  # type: ignore[method-assign]
