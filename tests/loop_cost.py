"""What otel-handoff's code costs a thread's running event loop, counted, not timed against a clock.

:func:`install` sets a profiler on the calling thread (``sys.setprofile``). From then on, every
stretch of that thread's execution inside a frame of ``otel_handoff`` entered while an event loop
runs on the thread is charged to us: its CPU time (``time.thread_time()``, which a busy machine
does not inflate the way wall time), our function calls, and the modules imported in it. A call
our wrapper makes to the function it wraps (wrapt's ``wrapped``) is the framework's own work and
is not charged; what our code imports or starts (the SDK, an exporter, a thread) is. Work done
before the loop runs (a process's set-up) is not charged: it is off the loop.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import otel_handoff

OURS = str(Path(otel_handoff.__file__).resolve().parent) + "/"


@dataclass
class LoopCost:
    cpu_s: float = 0.0  # thread CPU time inside our frames on the loop (the profiler's own included)
    calls: int = 0  # calls of our functions on the loop
    imported: list[str] = field(default_factory=list)  # modules first imported there
    _stack: list[bool] = field(default_factory=list)  # per live frame: charged to us?
    _since: float = 0.0
    _modules: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"cpu_ms": self.cpu_s * 1000, "calls": self.calls, "imported": self.imported}

    def _start(self) -> None:
        self._since = time.thread_time()
        self._modules = len(sys.modules)

    def _stop(self) -> None:
        self.cpu_s += time.thread_time() - self._since
        if len(sys.modules) != self._modules:
            self.imported += list(sys.modules)[self._modules :]  # insertion order: the newest last

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            outer = self._stack[-1] if self._stack else False
            ours = frame.f_code.co_filename.startswith(OURS)
            if ours:
                charged = outer or asyncio._get_running_loop() is not None
                self.calls += charged
            else:
                charged = outer and not _is_the_wrapped_call(frame)
            self._stack.append(charged)
            if charged and not outer:
                self._start()
            elif outer and not charged:
                self._stop()
        elif event == "return":
            if not self._stack:  # a frame that was running before install()
                return
            charged = self._stack.pop()
            outer = self._stack[-1] if self._stack else False
            if charged and not outer:
                self._stop()
            elif outer and not charged:
                self._start()


def _is_the_wrapped_call(frame: FrameType) -> bool:
    """Is ``frame`` the framework's function our wrapper was given (``wrapped``), called by it?"""
    caller = frame.f_back
    if caller is None or not caller.f_code.co_filename.startswith(OURS):
        return False
    wrapped = caller.f_locals.get("wrapped")
    code = getattr(getattr(wrapped, "__func__", wrapped), "__code__", None)
    return code is frame.f_code


def install() -> LoopCost:
    """Charge our code on this thread's event loop from now on; the returned record fills in."""
    cost = LoopCost()
    sys.setprofile(cost.profile)
    return cost
