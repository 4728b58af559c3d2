"""Containment of faults in otel-handoff's own code.

An instrumentation runs inside someone's production agent: a bug of ours (say, an
attribute a future framework release renamed) must cost a trace, never a call. Every
wrapper runs its bookkeeping through :func:`guard`, which logs each distinct fault once.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

_LOG = logging.getLogger("otel_handoff")
_reported: set[tuple[str, str, int]] = set()

T = TypeVar("T")


def report(where: str, exc: BaseException) -> None:
    """Log a fault in our own code once (one line of code raising, one log), with what to report."""
    frames = traceback.extract_tb(exc.__traceback__)
    key = (type(exc).__name__, frames[-1].filename, frames[-1].lineno or 0) if frames else (where, "", 0)
    if key in _reported:
        return
    _reported.add(key)
    _LOG.error(
        "otel-handoff: internal error in %s (%s: %s); the agent is unaffected, this handoff's "
        "trace may be incomplete. Please report it with your otel-handoff and framework versions.",
        where,
        type(exc).__name__,
        exc,
        exc_info=exc,
    )


def guard(where: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
    """Run ``func``; on an exception, report it once and return None.

    (The LiveKit wrappers on every handoff's path write ``try``/``except``/:func:`report` inline
    instead: the same containment without a call layer per step.)
    """
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        report(where, exc)
        return None
