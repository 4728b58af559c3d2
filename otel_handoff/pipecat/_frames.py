"""One frame awaited at a worker's edge, through the worker's own event, and nothing after it.

A ``PipelineWorker`` tests every frame reaching its sink (``on_frame_reached_downstream``) or its
source (``on_frame_reached_upstream``) against a filter of frame types anyway, and calls its
handlers for the types in it. While a handoff awaits a frame (the new worker's first output, the
old worker's audio stopping) our handler is there and our types are in the filter; once it came,
or the handoff is over, both are gone: the frames in between cost nothing of ours. Where the app
has a handler of its own on that event with a filter that leaves our types out, adding them would
change what its handler gets: there nothing is awaited (the phase is left out).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from ..core.faults import guard
from ._output import Held, hold

DOWNSTREAM = ("on_frame_reached_downstream", "reached_downstream_types", "set_reached_downstream_filter")
UPSTREAM = ("on_frame_reached_upstream", "reached_upstream_types", "set_reached_upstream_filter")


class FrameAwaited:
    """The first frame of ``types`` at one edge of ``worker``: ``arrived(now_ns, frame)`` once."""

    __slots__ = (
        "_added",
        "_event",
        "_handler",
        "_marks",
        "_set_filter",
        "_types",
        "_worker",
        "arrived",
        "listening",
    )

    def __init__(
        self,
        worker: Any,
        edge: tuple[str, str, str],
        types: tuple[type, ...],
        arrived: Callable[[int, Any], None],
        marks: str | None = None,
    ) -> None:
        """``marks``: while it is awaited, the worker's output transports note that method's run
        of speech (``_output.SPEECH_STARTED`` or ``SPEECH_STOPPED``)."""
        self._worker = weakref.ref(worker)  # a handoff awaiting it must not keep the worker alive
        self._event, filter_property, self._set_filter = edge
        self._types = types
        self.arrived = arrived
        self.listening = False
        self._added: tuple[type, ...] = ()
        self._marks: Held | None = None
        current = tuple(getattr(worker, filter_property))
        registered = getattr(worker, "_event_handlers", {}).get(self._event)
        handlers = getattr(registered, "handlers", None)
        if registered is None or not isinstance(handlers, list):
            return  # a worker without the event (or whose handlers we cannot read): we do not guess
        if handlers and not all(issubclass(t, current) for t in types):
            return  # the app's handler would be handed our frames too

        async def handler(_: Any, frame: Any) -> None:
            if self.listening and isinstance(frame, self._types):
                now = time.time_ns()
                self.stop()
                guard("a frame awaited", self.arrived, now, frame)

        self._handler = handler
        self._added = tuple(t for t in types if not issubclass(t, current))
        worker.add_event_handler(self._event, handler)
        if self._added:
            getattr(worker, self._set_filter)((*current, *self._added))
        self.listening = True
        if marks is not None:
            self._marks = hold(worker, marks)

    def stop(self) -> None:
        """Our handler and types off the worker (once)."""
        if not self.listening:
            return
        self.listening = False
        if self._marks is not None:
            self._marks.release()
            self._marks = None
        worker = self._worker()
        if worker is None:
            return
        worker.remove_event_handler(self._event, self._handler)
        if self._added:
            filter_property = (
                "reached_downstream_types" if self._event == DOWNSTREAM[0] else "reached_upstream_types"
            )
            kept = [t for t in getattr(worker, filter_property) if t not in self._added]
            getattr(worker, self._set_filter)(tuple(kept))
