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
import sys
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


class _Daemon:
    """A daemon thread of ours, started ahead of need (when an instrumentor or ``configure()`` sets
    up, and again in a forked child), never at the process's end: CPython 3.12 refuses to start a
    thread at interpreter shutdown (``RuntimeError``), which had lost every span at exit there."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> bool:
        """Start the thread unless it runs; False when the interpreter refuses a new thread."""
        with self._starting:
            if self.running:
                return True
            thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            try:
                thread.start()
            except RuntimeError:  # interpreter shutdown (3.12), or no more threads
                return False
            self._thread = thread
            return True

    def _run(self) -> None:
        raise NotImplementedError


class _Lane(_Daemon):
    """Runs what it is handed, in order (the exit's provider shutdown, its exporters' stop)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    def run(self, work: Callable[[], None]) -> threading.Event | None:
        """``work`` on this lane's thread; the event is set once it has run. None: there is no
        thread to run it on (refused at the interpreter's end); the caller does without."""
        if not self.start():
            return None
        done = threading.Event()

        def work_then_say() -> None:
            try:
                work()
            finally:
                done.set()

        self._queue.put(work_then_say)
        return done

    def _run(self) -> None:
        while True:
            self._queue.get()()


class _Flusher(_Daemon):
    """Flushes the providers asked for, in the order asked, on one thread of ours.

    Asking costs a conversation's end one put on a C queue (the tracer is resolved to its
    provider on the thread). Asks that arrive while a flush runs share the next one; in the
    ``coalesced`` mode a conversation's flush also waits until :data:`COALESCE_SECONDS` have passed
    since the last one started, so a busy server exports about once a second, not once per
    conversation. An urgent ask (the process's or a server's end) does not wait.
    """

    def __init__(self) -> None:
        super().__init__("otel-handoff-flush")
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._counting = threading.Lock()
        self._asked = 0  # under _counting: askers run on any thread
        self._done = 0  # written by the thread only, under _progress
        self._progress = threading.Condition()
        self._urgent = threading.Event()
        self._last_start = -COALESCE_SECONDS

    @property
    def asked(self) -> int:
        return self._asked

    @property
    def done(self) -> int:
        return self._done

    def ask(self, item: Any, *, urgent: bool = False) -> bool:
        """``item``: a tracer (its provider is flushed) or a provider. False: there is no thread
        to flush on (refused at the interpreter's end); nothing was queued."""
        if not self.start():
            return False
        with self._counting:
            self._asked += 1
        self._queue.put(item)
        if urgent:
            self._urgent.set()
        return True

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            wait = self._last_start + COALESCE_SECONDS - time.monotonic()
            if wait > 0 and flush_mode() == COALESCED:
                self._urgent.wait(wait)  # the conversations ending meanwhile share one flush
            self._urgent.clear()
            while not self._queue.empty():
                batch.append(self._queue.get())
            self._last_start = time.monotonic()
            for provider in {id(p): p for p in map(_as_provider, batch)}.values():
                _flushed(provider)  # one that fails is its exporter's to report
            with self._progress:
                self._done += len(batch)
                self._progress.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for what was asked so far; True when it is done."""
        with self._counting:
            asked = self._asked
        with self._progress:
            return self._progress.wait_for(lambda: self._done >= asked, timeout)


def _flushed(provider: Any, timeout: float | None = None) -> bool:
    """Flush ``provider``; False when it said it could not (its exporter logs why)."""
    flush = getattr(provider, "force_flush", None)
    if flush is None:
        return True  # the API's no-op or proxy provider: nothing is queued anywhere
    try:
        done = flush() if timeout is None else flush(int(timeout * 1000))
    except Exception as exc:  # ours to log; the exporter reports its own failures
        _LOG.debug("otel-handoff: a flush failed: %s", exc)
        return False
    return done is not False


def _as_provider(item: Any) -> Any:
    return provider_of(item) if isinstance(item, trace.Tracer) else item


# --- when a conversation ends -----------------------------------------------------------------------
FLUSH_SETTING = "OTEL_HANDOFF_CONVERSATION_FLUSH"
ALWAYS, COALESCED, OFF, AUTO = "always", "coalesced", "off", "auto"
COALESCE_SECONDS = 1.0  # in the coalesced mode, at most one conversation-end flush a second
# set where a function's process is frozen or ended as soon as its handler returns
_SERVERLESS_MARKERS = ("AWS_LAMBDA_FUNCTION_NAME", "FUNCTIONS_WORKER_RUNTIME", "FUNCTION_TARGET")
_mode: dict[str, str] = {}


def flush_mode() -> str:
    """``OTEL_HANDOFF_CONVERSATION_FLUSH``, read once: ``always``, ``coalesced`` or ``off``.

    ``auto`` (the default) is ``always`` where a process can end as soon as its conversation does
    without ``atexit`` running first (a multiprocessing job process, a serverless handler) and
    ``coalesced`` elsewhere (bench/conversation_flush.py measured why).
    """
    mode = _mode.get("value")
    if mode is None:
        mode = _mode["value"] = _read_flush_mode()
    return mode


def _read_flush_mode() -> str:
    from .settings import first_set, report_problem

    setting = first_set(FLUSH_SETTING)
    value = setting[1].lower() if setting else AUTO
    if value not in (ALWAYS, COALESCED, OFF, AUTO):
        report_problem(
            FLUSH_SETTING,
            f"is {setting[1]!r}" if setting else "",
            "use auto, always, coalesced or off",
            "Read as auto",
            kept=True,
        )
        value = AUTO
    if value != AUTO:
        return value
    import multiprocessing

    if multiprocessing.parent_process() is not None or any(os.environ.get(m) for m in _SERVERLESS_MARKERS):
        return ALWAYS
    return COALESCED


_flusher = _Flusher()
_lanes = {"exit": _Lane("otel-handoff-exit"), "stop": _Lane("otel-handoff-stop")}


def lane(name: str) -> _Lane:
    """The exit's lanes: ``exit`` (providers shut down), ``stop`` (exporters stopped when that hangs)."""
    return _lanes[name]


def _new_threads_in_child() -> None:
    """No thread comes along into a forked child: it gets its own, started now, before its end."""
    global _flusher
    _flusher = _Flusher()
    _mode.clear()  # read anew: ``auto`` differs in a job process
    for name, old in list(_lanes.items()):
        _lanes[name] = _Lane(old.name)
    if _state["registered"]:
        _start_threads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_threads_in_child)


def conversation_ended(tracer: trace.Tracer) -> None:
    """A conversation with a handoff ended: what it left in the batch leaves now, off its thread
    (or within :data:`COALESCE_SECONDS`, or with the batch timer: :func:`flush_mode`)."""
    if flush_mode() != OFF:
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


def _start_threads() -> None:
    for daemon in (_flusher, *_lanes.values()):
        daemon.start()


def _register_process_end() -> None:
    if _state["registered"]:
        return
    _state["registered"] = True
    _start_threads()
    atexit.register(_run_exits)
    _register_finalizer()
    from multiprocessing import util

    util.register_after_fork(_after_fork, _AfterFork.__call__)  # kept in every child: registered once


# --- a uvicorn server's end: wrapped while an instrumentor of ours is in place ----------------------
_instrumented: set[type] = set()
_server = {"hooked": False, "wrapped": None}


def instrumented(instrumentor: type) -> None:
    """``instrumentor`` is in place: while any is, a uvicorn server's end flushes every provider."""
    _instrumented.add(instrumentor)
    if not _server["hooked"]:
        _server["hooked"] = True
        import wrapt

        wrapt.register_post_import_hook(_wrap_server_shutdown, "uvicorn.server")
    elif "uvicorn.server" in sys.modules:
        _wrap_server_shutdown(sys.modules["uvicorn.server"])


def uninstrumented(instrumentor: type) -> None:
    """``instrumentor`` was taken out; with the last, uvicorn's ``Server.shutdown`` is unwrapped."""
    _instrumented.discard(instrumentor)
    server = _server["wrapped"]
    if _instrumented or server is None:
        return
    _server["wrapped"] = None
    from opentelemetry.instrumentation.utils import unwrap

    unwrap(server, "shutdown")


def _wrap_server_shutdown(module: Any) -> None:
    server = getattr(module, "Server", None)
    if not _instrumented or _server["wrapped"] is not None:
        return
    if server is None or not callable(getattr(server, "shutdown", None)):
        _LOG.debug("otel-handoff: no uvicorn Server.shutdown to flush after")
        return
    import wrapt

    wrapt.wrap_function_wrapper(server, "shutdown", _after_server_shutdown)
    _server["wrapped"] = server


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
    return _flush_all(_every_provider(), timeout)


def _every_provider(but: set[int] | None = None) -> list[Any]:
    providers = {id(p): p for p in (*_providers.values(), trace.get_tracer_provider())}
    return [p for key, p in providers.items() if key not in (but or set())]


def _flush_all(providers: list[Any], timeout: float) -> bool:
    """Flush ``providers`` on our thread within ``timeout``; where there is none (refused at the
    interpreter's end), here, each bounded by its own flush timeout."""
    deadline = time.monotonic() + timeout
    if all(_flusher.ask(provider, urgent=True) for provider in providers):
        return flush_pending(timeout)
    flushed = True
    for provider in providers:
        flushed = _flushed(provider, max(0.0, deadline - time.monotonic())) and flushed
    return flushed


class _AfterFork:
    """What multiprocessing's after-fork registry holds (it keeps objects by weak reference); the
    registry survives into every child, so this is registered once and puts back the finalizer
    that ``_bootstrap`` cleared."""

    def __call__(self) -> None:
        _state["ran"] = False  # a child's exit is its own
        _register_finalizer()


_after_fork = _AfterFork()


def _register_finalizer() -> None:
    """A multiprocessing finalizer: a child's ``_bootstrap`` runs them before its ``os._exit``."""
    from multiprocessing import util

    util.Finalize(None, _run_exits, exitpriority=0)


def _run_exits() -> None:
    """Every provider our spans went to is flushed, the ones shut down by an exit step included,
    all within about :data:`EXIT_TIMEOUT_SECONDS` plus what those steps bound themselves. What
    could not be flushed is said in one warning line (an exit step says its own)."""
    if _state["ran"]:
        return
    _state["ran"] = True
    try:
        owned = {id(provider) for _, provider in _exits if provider is not None}
        others = _every_provider(but=owned)
        deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
        queued = all(_flusher.ask(provider, urgent=True) for provider in others)
        for callback, _ in list(_exits):
            try:
                callback()
            except Exception as exc:
                _LOG.debug("otel-handoff: an exit step failed: %s", exc)
        if not others:
            return  # each exit step said what its own provider lost
        remaining = max(0.0, deadline - time.monotonic())
        if queued:  # a flush that fails is its exporter's to report (ours says it in its one line)
            flush_pending(remaining)
            return
        # no thread of ours at all: flushed here, and said when that did not succeed
        unflushed = [] if _flush_all(others, remaining) else sorted({type(p).__name__ for p in others})
        if unflushed:
            _LOG.warning(
                "otel-handoff: spans still queued in %s may not have been delivered: its flush at the "
                "process's end did not succeed within %g s; check that its exporter's receiver answers.",
                ", ".join(unflushed),
                EXIT_TIMEOUT_SECONDS,
            )
    except Exception as exc:  # never a traceback at the app's exit
        _LOG.warning("otel-handoff: flushing at the process's end failed: %s", exc)
