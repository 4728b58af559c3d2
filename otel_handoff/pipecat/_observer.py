"""What we put on a flow's worker (an observer for first speech, a handler for the conversation's
end), and how ``uninstrument()`` takes both off again.

An observer on a worker is not free: Pipecat then queues every frame push of the pipeline (audio
included) to it through a proxy task. So the observer is only there while a transition awaits
the bot's first speech, where Pipecat can add one to a running pipeline (1.7 and later); on a
release that cannot (1.5: only if another observer is already there), it stays from the start.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from collections.abc import Coroutine
from typing import Any

from pipecat.frames.frames import BotStartedSpeakingFrame
from pipecat.observers.base_observer import BaseObserver

from ..core.faults import guard
from ._transition import FlowState, FlowsTelemetry

_LOG = logging.getLogger(__name__)
_FINISHED = "on_pipeline_finished"
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
    """Does Pipecat give an observer added to a running pipeline its proxy (whatever else is there)?"""
    from pipecat.pipeline.worker_observer import WorkerObserver

    try:
        source = inspect.getsource(WorkerObserver.add_observer)
    except (OSError, TypeError):
        return False
    return "self._proxies is not None" in source


class WorkerWatch:
    """Our ``on_pipeline_finished`` handler on one worker and, while speech is awaited, our observer."""

    def __init__(self, telemetry: FlowsTelemetry, state: FlowState, worker: Any) -> None:
        self._worker = weakref.ref(worker)
        self._observer = _FirstSpeech(telemetry, state)
        self._on_demand = telemetry.observer_on_demand
        self._attached = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None  # the worker's loop is not known yet

        async def finished(*_: Any) -> None:
            guard(_FINISHED, state.finish, time.time_ns())

        self._finished = finished
        worker.add_event_handler(_FINISHED, finished)
        if not self._on_demand:
            self.await_speech()

    def await_speech(self) -> None:
        """A transition ended: watch the frames until the bot speaks in the new node."""
        worker = self._worker()
        if worker is not None and not self._attached:
            worker.add_observer(self._observer)
            self._attached = True

    def speech_seen(self) -> None:
        """No transition awaits speech any more: the frames go unobserved again."""
        if self._on_demand and self._attached:
            self._remove_observer()

    def detach(self) -> None:
        """Take the handler off now and the observer as soon as its worker's loop allows."""
        worker = self._worker()
        if worker is None:
            return
        worker.remove_event_handler(_FINISHED, self._finished)
        if self._attached:
            self._remove_observer()

    def _remove_observer(self) -> None:
        """``remove_observer`` is a coroutine: on a pipeline that runs, it is handed to the loop it
        runs on; on one that does not, it has nothing to wait for and completes right here."""
        worker = self._worker()
        self._attached = False
        if worker is None:
            return
        removal = worker.remove_observer(self._observer)
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
