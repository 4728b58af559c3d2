"""The test's instruments inside the agent's processes: measurements, not tracing.

``agent.py`` calls :func:`install` when ``LIVEKIT_CALL_MEASUREMENTS`` names a file; every
process of the worker then appends JSON lines to it:

- ``first_frame``: the wall-clock time (``time.time_ns()``) an agent's first audio frame was
  handed to the room (``rtc.AudioSource.capture_frame``), which agent (its tone), the source's
  queue at that moment, the room and the process id;
- ``frames``: the *new* agent's first words as its audio source took them: per frame, when
  ``capture_frame`` was called and when it returned, and the frame's seconds; and what the source
  holds (``queue_s``: 200 ms, livekit-agents' room output). Past that each capture returns once the
  process's native sender has taken as much audio, at real time: a sender the machine starves
  returns late, a loop it starves asks late;
- ``stats``: at the *new* agent's first frame, ``await track.get_stats()`` of the published audio
  track (``rtc.LocalAudioTrack``) — what WebRTC tells the agent's side at that moment;
- ``exit``: how the process ended, from a ``multiprocessing`` finalizer and from ``atexit``
  (a job process ends with ``os._exit`` after multiprocessing's finalizers: only the first runs).

A room named ``crash-…`` gets a crash: the job's entrypoint raises once the new agent's first
frame is out, as an application bug after the handoff would.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import multiprocessing.util
import os
import threading
import time
import weakref
from typing import Any

import numpy as np
import tones
from google.protobuf.json_format import MessageToDict
from livekit import rtc
from livekit.agents import get_job_context

CRASH_PREFIX = "crash-"
FIRST_AGENT = "triage"
QUEUE_MS_DEFAULT = 1000  # rtc.AudioSource's queue_size_ms
FIRST_WORDS_S = 0.3  # of the new agent's first words (a 0.4 s tone, scripted.ToneTTS), timed frame by frame

_user_entrypoint: Any = None
_tracks: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_last_voice: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# source -> the new agent's first frames: [called_ns, returned_ns, seconds] each, until FIRST_WORDS_S
_first_words: weakref.WeakKeyDictionary[Any, list[list[float]]] = weakref.WeakKeyDictionary()
_queue_s: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()  # source -> what it holds
_new_agent_out: dict[str, asyncio.Event] = {}  # room -> the new agent's first frame is out
_exit_watched: set[int] = set()  # pids whose exit is recorded
_pending: set[asyncio.Task[None]] = set()
_lock = threading.Lock()


def record(event: str, **fields: Any) -> None:
    """One JSON line, appended in one write (several processes share the file)."""
    line = json.dumps({"event": event, "pid": os.getpid(), **fields}, separators=(",", ":")) + "\n"
    fd = os.open(os.environ["LIVEKIT_CALL_MEASUREMENTS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def install(server: Any) -> None:
    """Wrap the room's audio source and track creation, and the job's entrypoint."""
    global _user_entrypoint
    if getattr(rtc.AudioSource.capture_frame, "_measured", False):
        return
    capture_frame = rtc.AudioSource.capture_frame
    create_audio_track = rtc.LocalAudioTrack.create_audio_track
    make_source = rtc.AudioSource.__init__

    def measured_source(self: rtc.AudioSource, *args: Any, **kwargs: Any) -> None:
        make_source(self, *args, **kwargs)
        held = kwargs.get("queue_size_ms", args[2] if len(args) > 2 else QUEUE_MS_DEFAULT)
        _queue_s[self] = held / 1000

    async def measured_capture_frame(self: rtc.AudioSource, frame: rtc.AudioFrame) -> None:
        now = time.time_ns()
        queued = self.queued_duration
        try:
            voice = tones.whose(np.frombuffer(frame.data, dtype=np.int16), frame.sample_rate)
            if voice is not None and _last_voice.get(self) != voice:
                _last_voice[self] = voice
                _first_frame(self, voice, now, queued)
        except Exception as exc:  # an instrument must not change the call; the test sees this line
            record("measure_error", error=repr(exc))
        await capture_frame(self, frame)
        words = _first_words.get(self)
        if words is not None:
            try:
                _took(self, words, now, frame.samples_per_channel / frame.sample_rate)
            except Exception as exc:
                record("measure_error", error=repr(exc))

    def measured_create_audio_track(name: str, source: Any) -> rtc.LocalAudioTrack:
        track = create_audio_track(name, source)
        _tracks[source] = track
        return track

    measured_capture_frame._measured = True  # type: ignore[attr-defined]
    rtc.AudioSource.capture_frame = measured_capture_frame  # type: ignore[method-assign]
    rtc.AudioSource.__init__ = measured_source  # type: ignore[method-assign]
    rtc.LocalAudioTrack.create_audio_track = staticmethod(measured_create_audio_track)  # type: ignore[method-assign]
    _user_entrypoint = server._entrypoint_fnc
    server._entrypoint_fnc = entrypoint  # a module-level function: the job process unpickles it


def _room() -> str:
    ctx = get_job_context(required=False)
    return ctx.room.name if ctx is not None else ""


def _first_frame(source: rtc.AudioSource, voice: str, now: int, queued: float) -> None:
    room = _room()
    _watch_exit(room)
    record("first_frame", room=room, agent=voice, time_ns=now, queued_s=queued)
    if voice == FIRST_AGENT:
        return
    _first_words[source] = []
    _new_agent_event(room).set()
    track = _tracks.get(source)
    if track is not None:
        task = asyncio.get_running_loop().create_task(_dump_stats(track, room, voice, now))
        _pending.add(task)
        task.add_done_callback(_pending.discard)


def _took(source: rtc.AudioSource, words: list[list[float]], called_ns: int, seconds: float) -> None:
    """One of the new agent's first frames was taken; once its first words are, they are recorded."""
    words.append([called_ns, time.time_ns(), seconds])
    if sum(frame[2] for frame in words) >= FIRST_WORDS_S:
        del _first_words[source]
        queue_s = _queue_s.get(source)
        record("frames", room=_room(), agent=_last_voice.get(source), frames=words, queue_s=queue_s)


async def _dump_stats(track: rtc.LocalAudioTrack, room: str, voice: str, captured_ns: int) -> None:
    asked = time.time_ns()
    try:
        stats = [MessageToDict(s, preserving_proto_field_name=True) for s in await track.get_stats()]
    except Exception as exc:
        record("stats", room=room, agent=voice, error=repr(exc))
        return
    record("stats", room=room, agent=voice, captured_ns=captured_ns, asked_ns=asked, stats=stats)


def _new_agent_event(room: str) -> asyncio.Event:
    with _lock:
        return _new_agent_out.setdefault(room, asyncio.Event())


def _watch_exit(room: str) -> None:
    """Once per process, from inside the job (after multiprocessing's start-up cleared its
    finalizers): note which of the two exit paths runs."""
    pid = os.getpid()
    if pid in _exit_watched:
        return
    _exit_watched.add(pid)
    multiprocessing.util.Finalize(
        None, record, args=("exit",), kwargs={"how": "finalizers", "room": room}, exitpriority=0
    )
    atexit.register(record, "exit", how="atexit", room=room)


async def entrypoint(ctx: Any) -> None:
    """The application's entrypoint; in a ``crash-`` room it fails after the handoff."""
    await _user_entrypoint(ctx)
    if ctx.room.name.startswith(CRASH_PREFIX):
        await _new_agent_event(ctx.room.name).wait()
        raise RuntimeError("scripted crash: the job's entrypoint failed after the handoff")
