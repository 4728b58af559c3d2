"""A method shadowed on one object, and only while a handoff holds it.

Some framework methods a handoff needs to see run on a hot path: LiveKit's tracer starts every
span of every turn, Pipecat's media sender runs on every audio frame. Wrapped on their class, they
would run ours between handoffs too. Instead, while a handoff waits for such a call, an attribute
of ours on that one object shadows the class's method; when the last hold on it ends, the
attribute goes, and the object's own attribute (the app's, if it had one) comes back. Holds are
counted per object and method, under a lock: sessions in threads can share one object.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

# what shadows a method, made from what it shadows (the object's own attribute, or None)
MakeShadow = Callable[[Any], Any]


class _Shadow:
    __slots__ = ("holds", "method", "previous")

    def __init__(self, method: Any, previous: Any) -> None:
        self.holds = 1
        self.method = method
        self.previous = previous  # the object's own attribute before ours (the app's), if any


class Shadows:
    """Methods shadowed on single objects, each until its last hold is released."""

    __slots__ = ("_lock", "_shadows")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shadows: weakref.WeakKeyDictionary[Any, dict[str, _Shadow]] = weakref.WeakKeyDictionary()

    def hold(self, obj: Any, name: str, make: MakeShadow) -> None:
        """Shadow ``obj.name`` with ``make(previous)``, or hold the shadow already there once more
        (where the app set its own attribute since, theirs stays)."""
        with self._lock:
            shadows = self._shadows.get(obj)
            if shadows is None:
                shadows = self._shadows[obj] = {}
            shadow = shadows.get(name)
            if shadow is not None:
                shadow.holds += 1
                return
            previous = vars(obj).get(name)
            shadow = shadows[name] = _Shadow(make(previous), previous)
            vars(obj)[name] = shadow.method

    def release(self, obj: Any, name: str) -> None:
        """One hold fewer; the shadow goes with the last (a release after :meth:`clear` does nothing)."""
        with self._lock:
            shadows = self._shadows.get(obj)
            shadow = shadows.get(name) if shadows is not None else None
            if shadows is None or shadow is None:
                return
            shadow.holds -= 1
            if shadow.holds <= 0:
                del shadows[name]
                _unshadow(obj, name, shadow)

    def clear(self) -> None:
        """``uninstrument()``: every shadow goes, whatever still holds it."""
        with self._lock:
            for obj, shadows in list(self._shadows.items()):
                for name, shadow in shadows.items():
                    _unshadow(obj, name, shadow)
            self._shadows.clear()


def _unshadow(obj: Any, name: str, shadow: _Shadow) -> None:
    attributes = vars(obj)
    if attributes.get(name) is not shadow.method:
        return  # the app set its own since: it stays
    if shadow.previous is None:
        del attributes[name]
    else:
        attributes[name] = shadow.previous


def original(obj: Any, name: str, previous: Any) -> Any:
    """What ``obj.name`` is without us: the object's own attribute we shadow, else the class's
    method bound to it (looked up now, so another's patch of the class holds)."""
    if previous is not None:
        return previous
    cls = type(obj)
    return getattr(cls, name).__get__(obj, cls)
