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

from ..core.faults import report

DOWNSTREAM = ("on_frame_reached_downstream", "reached_downstream_types", "set_reached_downstream_filter")
UPSTREAM = ("on_frame_reached_upstream", "reached_upstream_types", "set_reached_upstream_filter")


class FrameAwaited:
    """The first frame of ``types`` at one edge of ``worker``: ``arrived(now_ns, frame)`` once."""

    __slots__ = ("_added", "_edge", "_handler", "_worker", "arrived", "listening")

    def __init__(
        self,
        worker: Any,
        edge: tuple[str, str, str],
        types: tuple[type, ...],
        arrived: Callable[[int, Any], None],
    ) -> None:
        self.arrived = arrived
        self.listening = False
        registered = getattr(worker, "_event_handlers", None)
        handlers = getattr(registered.get(edge[0]) if registered else None, "handlers", None)
        if handlers.__class__ is not list:
            return  # a worker without the event (or whose handlers we cannot read): we do not guess
        current = getattr(worker, edge[1])
        added = tuple(t for t in types if not issubclass(t, current)) if current else types
        if handlers and added:
            return  # the app's handler would be handed our frames too
        self._worker = weakref.ref(worker)  # a handoff awaiting it must not keep the worker alive
        self._edge = edge
        self._added = added

        async def handler(_: Any, frame: Any) -> None:
            if self.listening and isinstance(frame, types):
                now = time.time_ns()
                self.stop()
                try:
                    self.arrived(now, frame)
                except Exception as exc:
                    report("a frame awaited", exc)

        self._handler = handler
        worker.add_event_handler(edge[0], handler)
        if added:
            getattr(worker, edge[2])((*current, *added))
        self.listening = True

    def stop(self) -> None:
        """Our handler and types off the worker (once)."""
        if not self.listening:
            return
        self.listening = False
        worker = self._worker()
        if worker is None:
            return
        event, filter_property, set_filter = self._edge
        worker.remove_event_handler(event, self._handler)
        if self._added:
            added = self._added
            getattr(worker, set_filter)(tuple(t for t in getattr(worker, filter_property) if t not in added))
