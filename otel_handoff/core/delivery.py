"""What is ours leaves the process when a conversation ends, and when the process ends, however it ends.

A deployed voice agent runs each call in a job process that ends with ``os._exit`` (LiveKit's
forkserver children, any multiprocessing child): multiprocessing's finalizers run, ``atexit`` does
not. A batch processor exports on its timer (5 s by default, ``OTEL_BSP_SCHEDULE_DELAY``), so what
ended since its last tick, the handoffs of a short call and the framework's own session span among
them, would be lost. So:

* a conversation that had a handoff asks its tracer provider to flush when it ends
  (:func:`conversation_ended`), on a thread of ours: never on the event loop or the app's thread;
* the exits registered with :func:`at_process_end` run once, from ``atexit`` or from
  multiprocessing's finalizers (re-registered in every child multiprocessing starts), whichever
  comes first; each is bounded by its owner (:data:`EXIT_TIMEOUT_SECONDS`), so a collector that
  never answers cannot hold a job's exit;
* a uvicorn server (Pipecat's development runner, any FastAPI app) stopped by a signal shuts down
  gracefully, then re-raises the signal with its original disposition, the default: the process
  dies of it, no ``atexit`` runs. So when its graceful shutdown ends, every provider is flushed
  (:func:`_after_server_shutdown`), within :data:`EXIT_TIMEOUT_SECONDS`, off the event loop. Its
  signal handlers and what it returns or raises stay as they are: nothing is replaced.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

_LOG = logging.getLogger("otel_handoff")

EXIT_TIMEOUT_SECONDS = 1.0  # what a receiver that does not answer may add to a process's exit

# tracer -> the provider passed at instrument() (absent: the global provider, read when needed)
_providers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def remember(tracer: trace.Tracer, provider: Any) -> None:
    """The provider ``tracer`` came from, when the instrumentor was given one."""
    if provider is not None:
        try:
            _providers[tracer] = provider
        except TypeError:  # a tracer that takes no weak reference: the global provider then
            return
    _register_process_end()


def provider_of(tracer: trace.Tracer) -> Any:
    try:
        return _providers.get(tracer) or trace.get_tracer_provider()
    except TypeError:
        return trace.get_tracer_provider()


class _Flusher:
    """One daemon thread of ours flushes the providers asked for, in the order asked.

    Asking costs a conversation's end one put on a C queue (the tracer is resolved to its
    provider on the thread); the thread starts at the first ask and again in a forked child.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._asked = 0  # written by askers only
        self._done = 0  # written by the thread only
        self._progress = threading.Condition()

    def ask(self, item: Any) -> None:
        """``item``: a tracer (its provider is flushed) or a provider."""
        self._asked += 1
        self._queue.put(item)
        if self._thread is None:
            self._start()

    def _start(self) -> None:
        with self._progress:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="otel-handoff-flush", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get())
            providers = {id(p): p for p in map(_as_provider, batch)}
            for provider in providers.values():
                flush = getattr(provider, "force_flush", None)
                if flush is None:
                    continue  # the API's no-op or proxy provider: nothing is queued anywhere
                try:
                    flush()
                except Exception as exc:  # the exporter reports its own failures; this is ours
                    _LOG.debug("otel-handoff: flush at the end of a conversation failed: %s", exc)
            with self._progress:
                self._done += len(batch)
                self._progress.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for what was asked so far; True when it is done."""
        asked = self._asked
        with self._progress:
            return self._progress.wait_for(lambda: self._done >= asked, timeout)


def _as_provider(item: Any) -> Any:
    return provider_of(item) if isinstance(item, trace.Tracer) else item


_flusher = _Flusher()


def _new_flusher_in_child() -> None:
    """The flush thread does not come along into a forked child: it gets its own."""
    global _flusher
    _flusher = _Flusher()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_flusher_in_child)


def conversation_ended(tracer: trace.Tracer) -> None:
    """A conversation with a handoff ended: what it left in the batch leaves now, off its thread."""
    _flusher.ask(tracer)


def flush_pending(timeout: float = EXIT_TIMEOUT_SECONDS) -> bool:
    """Wait up to ``timeout`` seconds for the flushes asked for so far; True when they are done."""
    return _flusher.wait(timeout)


# --- the process's end ---------------------------------------------------------------------------
# (callback, the provider it shuts down itself or None)
_exits: list[tuple[Callable[[], None], Any]] = []
_state = {"registered": False, "ran": False}


def at_process_end(callback: Callable[[], None], *, shuts_down: Any = None) -> None:
    """Run ``callback`` once when the process ends: at interpreter exit, or after a multiprocessing
    child's target returns (forkserver, spawn and fork children end with ``os._exit``, no atexit).
    ``shuts_down``: the provider ``callback`` flushes and shuts down itself (not flushed again)."""
    _exits.append((callback, shuts_down))
    _register_process_end()


def unregister(function: Callable[..., None]) -> None:
    """Take back every exit step of ``function`` (a partial of it, too), as ``atexit.unregister``."""
    _exits[:] = [(c, p) for c, p in _exits if getattr(c, "func", c) is not function]


def _register_process_end() -> None:
    if _state["registered"]:
        return
    _state["registered"] = True
    atexit.register(_run_exits)
    _register_finalizer()
    import wrapt

    wrapt.register_post_import_hook(_wrap_server_shutdown, "uvicorn.server")


def _wrap_server_shutdown(module: Any) -> None:
    server = getattr(module, "Server", None)
    if server is None or not callable(getattr(server, "shutdown", None)):
        _LOG.debug("otel-handoff: no uvicorn Server.shutdown to flush after")
        return
    import wrapt

    wrapt.wrap_function_wrapper(module, "Server.shutdown", _after_server_shutdown)


async def _after_server_shutdown(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """uvicorn's graceful shutdown, then every provider flushed: the signal it re-raises next
    ends the process where ``atexit`` never runs. Flushed, not shut down: a process that stops a
    server programmatically lives on."""
    try:
        return await wrapped(*args, **kwargs)
    finally:
        try:
            await asyncio.to_thread(flush_everything)
        except Exception as exc:  # the shutdown goes on as it would have
            _LOG.debug("otel-handoff: flush after the server's shutdown failed: %s", exc)


def flush_everything(timeout: float = EXIT_TIMEOUT_SECONDS) -> bool:
    """Flush every provider our spans went to, waiting up to ``timeout`` seconds."""
    for provider in {id(p): p for p in (*_providers.values(), trace.get_tracer_provider())}.values():
        _flusher.ask(provider)
    return flush_pending(timeout)


class _AfterFork:
    """What multiprocessing's after-fork registry holds (it keeps objects by weak reference)."""

    def __call__(self) -> None:
        _state["ran"] = False  # a child's exit is its own
        _register_finalizer()


_after_fork = _AfterFork()


def _register_finalizer() -> None:
    """A multiprocessing finalizer (``_bootstrap`` clears the registry in each child it starts,
    then runs the after-fork callbacks: this one puts the finalizer back)."""
    from multiprocessing import util

    util.Finalize(None, _run_exits, exitpriority=0)
    util.register_after_fork(_after_fork, _AfterFork.__call__)


def _run_exits() -> None:
    """Every provider our spans went to is flushed, the ones shut down by an exit step included,
    all within about :data:`EXIT_TIMEOUT_SECONDS` plus what those steps bound themselves."""
    if _state["ran"]:
        return
    _state["ran"] = True
    deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
    owned = {id(provider) for _, provider in _exits if provider is not None}
    for provider in (*_providers.values(), trace.get_tracer_provider()):
        if id(provider) not in owned:
            _flusher.ask(provider)
    for callback, _ in list(_exits):
        try:
            callback()
        except Exception as exc:
            _LOG.debug("otel-handoff: an exit step failed: %s", exc)
    flush_pending(max(0.0, deadline - time.monotonic()))
