"""What we put on a flow's worker to see the bot's first speech after a transition, and a handler
for the conversation's end; and how ``uninstrument()`` takes them off again.

First speech is a ``BotStartedSpeakingFrame`` reaching the worker's source: the output transport
sends one copy downstream and one upstream (so the processors before it learn the bot speaks).
While a transition awaits it, and only then, the worker's own ``on_frame_reached_upstream`` event
carries the upstream copy to a handler of ours (its type added to the worker's upstream filter;
Pipecat tests every upstream frame against that filter anyway, so the frames in between cost
nothing of ours). Upstream, not downstream: Flows keeps its own handler and filter on the
downstream event, and would be called for our frame type too. Where the app handles the upstream
event itself, with a filter that leaves the frame out, adding it would change what the app's
handler gets: there an observer watches instead. An observer is not free: Pipecat then queues every
frame push of the pipeline (audio included) to it through a proxy task. It is only there while
speech is awaited, where Pipecat can add one to a running pipeline (1.7 and later). On a release
that cannot (1.5) it is there from the start if the app's handler is there when Flows starts; one
the app adds later leaves that conversation without ``first_speech``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Coroutine
from typing import Any

from pipecat.frames.frames import BotStartedSpeakingFrame
from pipecat.observers.base_observer import BaseObserver

from ..core.faults import guard
from ..core.shapes import code_names
from ._downlink import speech_started_ns
from ._transition import FlowState, FlowsTelemetry

_LOG = logging.getLogger(__name__)
_FINISHED = "on_pipeline_finished"
_REACHED = "on_frame_reached_upstream"
# observer removals handed to a running loop, kept until done (a task nobody holds can vanish)
DETACHING: set[asyncio.Future[Any]] = set()


class _FirstSpeech(BaseObserver):
    """Passes over every frame but ``BotStartedSpeakingFrame``; sees each frame once."""

    def __init__(self, telemetry: FlowsTelemetry, state: FlowState) -> None:
        super().__init__()
        self._telemetry = telemetry
        self._state = weakref.ref(state)
        self._last_frame_id: int | None = None

    async def on_push_frame(self, data: Any) -> None:
        frame = data.frame
        if not isinstance(frame, BotStartedSpeakingFrame) or not self._telemetry.enabled:
            return
        if frame.id == self._last_frame_id:
            return  # the same frame pushed on by the next processor
        self._last_frame_id = frame.id
        state = self._state()
        if state is not None and state.awaiting_speech is not None:
            guard("first speech", state.first_speech, time.time_ns())


def observers_join_running_pipelines() -> bool:
    """Does Pipecat give an observer added to a running pipeline its proxy (whatever else is there)?
    Read from its code (``self._proxies``, ``self._create_proxy``): an install without sources has it too."""
    from pipecat.pipeline.worker_observer import WorkerObserver

    return {"_proxies", "_create_proxy"} <= code_names(WorkerObserver.add_observer)


def source_events_carry_frames() -> bool:
    """Does the worker report frames of chosen types reaching its source (``on_frame_reached_upstream``)?"""
    from pipecat.pipeline.worker import PipelineWorker

    return all(
        callable(getattr(PipelineWorker, name, None))
        for name in ("add_reached_upstream_filter", "set_reached_upstream_filter")
    ) and isinstance(getattr(PipelineWorker, "reached_upstream_types", None), property)


class WorkerWatch:
    """Our ``on_pipeline_finished`` handler on one worker and, while speech is awaited, our
    ``on_frame_reached_upstream`` handler (or, where the app's own handler would see more, our
    observer)."""

    def __init__(self, telemetry: FlowsTelemetry, state: FlowState, worker: Any) -> None:
        self._worker = weakref.ref(worker)
        self._telemetry = telemetry
        self._state = state
        self._observer: _FirstSpeech | None = None  # made when first needed: seldom
        self._on_demand = telemetry.observer_on_demand
        self._source_events = telemetry.source_events
        self._attached = False  # our observer
        self._listening = False  # our source handler
        self._filtered = False  # we added BotStartedSpeakingFrame to the source's filter
        self._observer_always = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # the worker's loop is not known yet

        async def finished(*_: Any) -> None:
            guard(_FINISHED, state.finish, time.time_ns())

        async def reached(_: Any, frame: Any) -> None:
            speech = isinstance(frame, BotStartedSpeakingFrame) and telemetry.enabled
            if speech and state.awaiting_speech is not None:
                guard("first speech", state.first_speech, time.time_ns())

        self._finished = finished
        self._reached = reached
        worker.add_event_handler(_FINISHED, finished)
        if not self._on_demand and not self._source_only_ours(worker):
            self._observer_always = True  # it cannot join later (1.5): there from the start
            worker.add_observer(self._first_speech())
            self._attached = True

    def worker(self) -> Any | None:
        """The worker watched, while it lives."""
        return self._worker()

    def speech_started_ns(self) -> int | None:
        """When an output transport of the worker's pipeline last started a run of speech."""
        return speech_started_ns(self._worker())

    def await_speech(self) -> None:
        """A transition ended: watch for the bot's speech in the new node."""
        worker = self._worker()
        if worker is None or self._observer_always or self._listening or self._attached:
            return
        if self._source_only_ours(worker):
            worker.add_event_handler(_REACHED, self._reached)
            if not issubclass(BotStartedSpeakingFrame, worker.reached_upstream_types):
                worker.add_reached_upstream_filter((BotStartedSpeakingFrame,))
                self._filtered = True
            self._listening = True
        elif self._on_demand:
            worker.add_observer(self._first_speech())
            self._attached = True

    def speech_seen(self) -> None:
        """No transition awaits speech any more: nothing of ours watches the frames."""
        worker = self._worker()
        if self._listening and worker is not None:
            self._stop_listening(worker)
        if self._attached and not self._observer_always:
            self._remove_observer()

    def detach(self) -> None:
        """Take the handlers off now and the observer as soon as its worker's loop allows."""
        worker = self._worker()
        if worker is None:
            return
        worker.remove_event_handler(_FINISHED, self._finished)
        if self._listening:
            self._stop_listening(worker)
        if self._attached:
            self._remove_observer()

    def _first_speech(self) -> _FirstSpeech:
        if self._observer is None:
            self._observer = _FirstSpeech(self._telemetry, self._state)
        return self._observer

    def _source_only_ours(self, worker: Any) -> bool:
        """Can the source's event carry first speech to us without the app's handler seeing more?

        Yes where the app's filter takes the frame already, or no handler but ours listens (Flows
        has none there). Pipecat keeps the handlers in ``_event_handlers``: unreadable, we do not
        guess."""
        if not self._source_events:
            return False
        if issubclass(BotStartedSpeakingFrame, worker.reached_upstream_types):
            return True
        registered = getattr(worker, "_event_handlers", {}).get(_REACHED)
        handlers = getattr(registered, "handlers", None)
        return isinstance(handlers, list) and all(h is self._reached for h in handlers)

    def _stop_listening(self, worker: Any) -> None:
        self._listening = False
        worker.remove_event_handler(_REACHED, self._reached)
        if self._filtered:
            self._filtered = False
            kept = list(worker.reached_upstream_types)
            if BotStartedSpeakingFrame in kept:  # once: we added it only where no type took it
                kept.remove(BotStartedSpeakingFrame)
                worker.set_reached_upstream_filter(tuple(kept))

    def _remove_observer(self) -> None:
        """``remove_observer`` is a coroutine: on a pipeline that runs, it is handed to the loop it
        runs on; on one that does not, it has nothing to wait for and completes right here."""
        worker = self._worker()
        self._attached = False
        if worker is None:
            return
        removal = worker.remove_observer(self._first_speech())
        loop = self._loop if self._loop is not None and self._loop.is_running() else _running_loop()
        if loop is None:
            _complete_now(removal)
        elif loop is _running_loop():
            _keep(loop.create_task(removal))
        else:
            _keep(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(removal, loop), loop=loop))


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _keep(future: asyncio.Future[Any]) -> None:
    DETACHING.add(future)
    future.add_done_callback(DETACHING.discard)


def _complete_now(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run a coroutine that has nothing to wait for (no loop runs its pipeline) to its end.

    A worker whose pipeline ran and ended on a loop now closed would need that loop to cancel
    its observers' tasks: there the observer stays, inert (``telemetry.enabled`` is off) on a
    worker that runs no more.
    """
    try:
        coroutine.send(None)
    except StopIteration:
        return
    except RuntimeError as exc:  # "no running event loop": the worker's loop is gone
        _LOG.debug("otel-handoff: observer left on a finished worker (%s)", exc)
        return
    coroutine.close()
    _LOG.debug("otel-handoff: an observer removal had to wait with no loop running; left to the worker")
