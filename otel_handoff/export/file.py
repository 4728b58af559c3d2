"""``OTEL_TRACES_EXPORTER=otel_handoff_file``: spans appended to a file as OTLP JSON Lines.

For local use, where an app's spans should land somewhere ``otel-handoff summary`` reads without a
collector, and its stdout stays its own (the console exporter shares it with the app's prints).
An entry point of ``opentelemetry_traces_exporter``, so ``configure()`` and ``opentelemetry-instrument``
alike select it by name; the path is ``OTEL_HANDOFF_EXPORT_FILE``. The lines are those of
``otel-handoff demo --export`` (:func:`.otlp_json.json_lines`: one request per trace).

Several processes may append to one path (a LiveKit worker's job processes, a test run's
workers): each export opens the file with ``O_APPEND`` and writes its lines under an exclusive
``flock`` of it, so lines of any length never interleave (``O_APPEND`` alone keeps a write whole
only up to what the file system writes at once; the lock covers a short write's remainder too).
Opened per export, not once: a forked child shares its parent's open file, and with it its lock.
Without ``fcntl`` (Windows) the write is ``O_APPEND`` alone.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..core.settings import report_problem
from . import otlp_json

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["EXPORTER_NAME", "PATH_VARIABLE", "OtlpJsonFileSpanExporter"]

EXPORTER_NAME = "otel_handoff_file"  # the entry point's name, what OTEL_TRACES_EXPORTER takes
PATH_VARIABLE = "OTEL_HANDOFF_EXPORT_FILE"
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_OFF = "No spans are written to a file"
_LOG = logging.getLogger(__name__)  # configure()'s outage line quotes it (export.quiet)


class OtlpJsonFileSpanExporter(SpanExporter):
    """Appends each export's spans to ``path`` (default: ``OTEL_HANDOFF_EXPORT_FILE``) as OTLP JSON Lines.

    Never raises at start-up: a path that is unset or cannot be opened is said in one line, and
    every export then fails (``writable`` is False), as an exporter whose receiver is down.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else os.environ.get(PATH_VARIABLE, "").strip()
        self._lock = threading.Lock()  # one export at a time from this process's threads
        self._shut = False
        self._failing = False  # the last write failed: said once, until one succeeds
        self.writable = self._check()

    def _check(self) -> bool:
        if not self.path:
            report_problem(PATH_VARIABLE, "is not set", "set it to the file to append spans to", _OFF)
            return False
        try:
            os.close(os.open(self.path, _FLAGS, 0o644))
        except OSError as exc:
            report_problem(
                PATH_VARIABLE,
                f"is {self.path!r}, which cannot be opened for appending ({exc.strerror or exc})",
                "use a file in a folder that exists and is writable",
                _OFF,
            )
            return False
        return True

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shut or not self.writable:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        data = "".join(otlp_json.json_lines(spans)).encode("utf-8")
        with self._lock:
            try:
                append(self.path, data)
            except OSError as exc:
                if not self._failing:
                    self._failing = True
                    _LOG.warning("cannot append to %s: %s", self.path, exc.strerror or exc)
                return SpanExportResult.FAILURE
            self._failing = False
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is buffered: each export is written before it returns

    def shutdown(self) -> None:
        self._shut = True


def append(path: str, data: bytes) -> None:
    """``data`` at the end of ``path``, whole: ``O_APPEND`` under an exclusive ``flock``.

    Raises ``OSError``.
    """
    fd = os.open(path, _FLAGS, 0o644)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the close
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
