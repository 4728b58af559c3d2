"""Warnings a framework raises inside a call we wrap keep the attribution they have without us.

``warnings.warn(..., stacklevel=2)`` names the caller's line; when the caller is one of our
wrappers, the warning would name our file instead, Python's default filters would judge it by
our module (hiding a ``DeprecationWarning`` meant for ``__main__``), and filters written against
the framework's module would stop matching. The framework's own warning calls are pointed here,
and each skips our frames in the part of the stack its ``stacklevel`` counts. That is a walk of
the current stack only: nothing global changes, so it holds under threads and asyncio alike.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType
from typing import Any

_OURS = os.path.dirname(os.path.dirname(__file__)) + os.sep  # the otel_handoff package, as imported


def past_our_frames(stacklevel: int, caller: FrameType | None) -> int:
    """``stacklevel`` as counted from ``caller`` (level 1), lengthened by each frame of ours inside it."""
    frame, extra = caller, 0
    for _ in range(stacklevel - 1):
        frame = frame.f_back if frame is not None else None
        while frame is not None and frame.f_code.co_filename.startswith(_OURS):
            frame, extra = frame.f_back, extra + 1
        if frame is None:
            break
    return stacklevel + extra


class AttributedWarnings:
    """Stands in for the ``warnings`` module inside one framework module: the same, but ``warn``."""

    def __getattr__(self, name: str) -> Any:
        return getattr(warnings, name)

    def warn(
        self, message: Any, category: Any = None, stacklevel: int = 1, *args: Any, **kwargs: Any
    ) -> None:
        level = past_our_frames(stacklevel, sys._getframe(1))
        warnings.warn(message, category, level + 1, *args, **kwargs)  # +1: this frame


def attributed_warn_helper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A wrapt wrapper for a framework's ``warn(message, stacklevel=...)`` helper (Pipecat's
    ``warn_deprecated``): the same call, with our frames skipped (+1: this frame)."""
    stacklevel = kwargs.pop("stacklevel", args[1] if len(args) > 1 else 1)
    level = past_our_frames(stacklevel, sys._getframe(1))
    return wrapped(args[0] if args else kwargs.pop("message"), stacklevel=level + 1, **kwargs)
