"""When the output transport starts and ends a run of the bot's speech, seen only while a handoff
waits for it.

``BaseOutputTransport.MediaSender._bot_started_speaking`` runs on every audio frame the bot
speaks, and ``_bot_stopped_speaking`` every few seconds while it is quiet (on every output chunk
where a mixer is set): wrapped on the class, they would run ours on the per-frame path between
handoffs. Instead, while a handoff waits for the bot's first speech or for the old audio's end,
and only then, each media sender of the waiting worker's output transports gets the method
shadowed on the instance (an attribute of its own, calling the class's method, or the app's own
attribute it replaced); when the last wait on it ends the attribute goes (the app's comes back),
and at ``uninstrument()`` every one goes. A sender made after the wait began (a destination added
then), or by a transport started before ``instrument()``, is not seen: that handoff ends where the
frame saying so is seen instead. Which transports have senders is noted once a transport's start
(``set_transport_ready``), so where none has, a handoff does not look for them.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
import time
import types
import weakref
from typing import Any

from ..core.faults import guard
from ..core.shadow import Shadows, original
from ._downlink import note_speech_started, note_speech_stopped

SPEECH_STARTED = "_bot_started_speaking"
SPEECH_STOPPED = "_bot_stopped_speaking"
READY = "set_transport_ready"
OUTPUT = "pipecat.transports.base_output"

_enabled = False  # at instrument(): the release's media sender has both methods


# the media senders' methods shadowed while a handoff waits (``core.shadow``)
_SHADOWS = Shadows()


def available() -> bool:
    """Has the release's media sender both methods, made when its transport is ready? (Checked at
    ``instrument()``.)"""
    output = importlib.import_module(OUTPUT).BaseOutputTransport
    sender = getattr(output, "MediaSender", None)
    names = (SPEECH_STARTED, SPEECH_STOPPED)
    return callable(getattr(output, READY, None)) and all(callable(getattr(sender, n, None)) for n in names)


# id() -> output transport whose media senders exist (set up in ``set_transport_ready``), weakly:
# with none, a handoff has no sender to look for, and looks for none (a plain dict: its test is free)
_READY: dict[int, weakref.ref[Any]] = {}


async def wrap_transport_ready(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``BaseOutputTransport.set_transport_ready``: once a transport's start, never per frame."""
    result = await wrapped(*args, **kwargs)
    guard("set_transport_ready", _ready, instance)
    return result


def _ready(transport: Any) -> None:
    key = id(transport)
    _READY[key] = weakref.ref(transport, lambda _: _READY.pop(key, None))


def enable(marks: bool) -> None:
    """At ``instrument()``, once its checks passed: marks are taken from now on, if ``marks``."""
    global _enabled
    _enabled = _enabled or marks


def disable() -> None:
    """At ``uninstrument()``: every shadow goes, whatever still holds it."""
    global _enabled
    _enabled = False
    _SHADOWS.clear()


class Held:
    """The media senders of some output transports, shadowed for one method until :meth:`release`."""

    __slots__ = ("_name", "_senders")

    def __init__(self, outputs: tuple[Any, ...], name: str) -> None:
        self._name = name
        senders = _media_senders(outputs)
        self._senders = [weakref.ref(s) for s in senders]
        function = _started if name == SPEECH_STARTED else _stopped
        for sender in senders:
            _SHADOWS.hold(sender, name, functools.partial(_bound, function, sender))

    def release(self) -> None:
        """Once: the shadows this held go when nothing else holds them."""
        senders, self._senders = self._senders, []
        for ref in senders:
            sender = ref()
            if sender is not None:
                _SHADOWS.release(sender, self._name)


# worker -> its output transports (weakly), found once: a pipeline's processors are fixed
_OUTPUTS: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def hold(worker: Any, name: str) -> Held | None:
    """Shadow ``name`` on the media senders of ``worker``'s ready output transports, while held;
    None where it has none (another pipeline's ready transport is not this one's)."""
    if not _enabled or worker is None or not _READY:
        return None
    outputs = _OUTPUTS.get(worker)
    if outputs is None:
        outputs = _outputs(worker)
        if outputs:  # (none yet: its transport may not be ready yet)
            _OUTPUTS[worker] = outputs
    ready = tuple(ref for ref in outputs if id(ref()) in _READY)
    return Held(ready, name) if ready else None


def _outputs(worker: Any) -> tuple[Any, ...]:
    """The worker's output transports, weakly: one pass over its pipeline, nested ones included
    (a stack, no generator per level)."""
    output = getattr(sys.modules.get(OUTPUT), "BaseOutputTransport", None)
    found: list[Any] = []
    stack = [getattr(worker, "pipeline", None)] if output is not None else []
    while stack and len(found) < 64:
        processor = stack.pop()
        if isinstance(processor, output):
            found.append(weakref.ref(processor))
        elif processor is not None:
            stack.extend(getattr(processor, "processors", None) or ())
    return tuple(found)


def _media_senders(outputs: tuple[Any, ...]) -> list[Any]:
    found = []
    for ref in outputs:
        senders = getattr(ref(), "_media_senders", None)
        found += list(senders.values()) if isinstance(senders, dict) else []
    return found


def _bound(function: Any, sender: Any, previous: Any) -> Any:
    """Our ``function`` as the sender's method, with what it shadows: a method the app kept of ours
    calls what ours did."""
    return types.MethodType(functools.partial(function, previous), sender)


async def _started(previous: Any, sender: Any, *args: Any, **kwargs: Any) -> Any:
    """The media sender starts a run of the bot's speech: it pushes ``BotStartedSpeakingFrame``
    both ways, then hands the run's first audio to the transport's ``write_audio_frame`` in a task
    of its own (``asyncio.wait_for``). Noted once a run, when the loop next runs, with that task's
    first step, so ``first_speech`` ends at the write and not when the upstream copy, some
    processors later, reaches the worker's source (1 to 7 ms later on a loaded machine)."""
    speaking = getattr(sender, "_bot_speaking", True)
    result = await original(sender, SPEECH_STARTED, previous)(*args, **kwargs)
    if not speaking:
        guard("first speech", asyncio.get_running_loop().call_soon, _speech_started, sender)
    return result


def _speech_started(sender: Any) -> None:
    guard("first speech", note_speech_started, sender, time.time_ns())


async def _stopped(previous: Any, sender: Any, *args: Any, **kwargs: Any) -> Any:
    """The media sender ends a run of the bot's speech, its last audio written (a worker handoff's
    wait for the old audio ends there, not when the frame saying so reaches the session's source,
    some processors and a handler task later). Noted once a run."""
    now = time.time_ns()
    speaking = getattr(sender, "_bot_speaking", False)
    result = await original(sender, SPEECH_STOPPED, previous)(*args, **kwargs)
    if speaking:
        guard("speech stopped", note_speech_stopped, sender, now)
    return result
