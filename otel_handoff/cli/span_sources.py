"""Finished spans read back from what exporters and backends write, for ``otel-handoff summary``.

Every source becomes the same :class:`SpanRecord` (hex ids, nanosecond times, plain attribute
values), so the summary never cares where spans came from:

* OTLP/JSON: JSON Lines of ``ExportTraceServiceRequest`` (``otel-handoff demo --export``, the
  Collector's file exporter), or one such document, pretty-printed or not;
* the SDK's ``ConsoleSpanExporter``: a sequence of pretty-printed ``ReadableSpan.to_json()`` objects;
* Arize Phoenix's REST API (``/v1/projects/PROJECT/spans``), following ``next_cursor``;
* Jaeger's query API (``/api/traces?service=...``, ``/api/traces/ID``) and its ``/api/v3`` OTLP form;
* a saved Phoenix or Jaeger response.

What is not a span document (an app's own output beside the console exporter's) is skipped and
counted in a note; a span document that is malformed raises :class:`SpanSourceError` with one line
naming its line and the field path that is wrong, never a traceback.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..export import otlp_json
from ..export.credentials import split_userinfo

__all__ = ["SpanRecord", "SpanSourceError", "parse_spans", "read_spans"]

# a summary over a backend is one query, not a crawl: stop following cursors here
_MAX_PAGES = 10_000
_HTTP_TIMEOUT = 30.0
_OTHER_SIGNALS = ("resourceMetrics", "resourceLogs", "resourceProfiles")  # a Collector file may mix them
_STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}


class SpanSourceError(Exception):
    """The source cannot be read, or is not what it claims to be: a one-line reason."""


@dataclass(frozen=True)
class SpanRecord:
    """One finished span, whatever wrote it. Ids are lowercase hex; times are Unix ns."""

    trace_id: str
    span_id: str
    name: str
    parent_id: str | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    status: str = "UNSET"
    attributes: Mapping[str, Any] = field(default_factory=dict)
    links: tuple[str, ...] = ()  # span ids this span links to


# --- entry points ---------------------------------------------------------------------------------
def read_spans(
    source: str, notes: list[str] | None = None, headers: Mapping[str, str] | None = None
) -> list[SpanRecord]:
    """Spans from a file path, ``-`` (standard input), or an ``http(s)://`` Phoenix or Jaeger URL.

    ``notes`` collects what was tolerated (a cut-off last line), one line each. ``headers`` go
    with every request to a URL, after its userinfo (basic auth) and ``PHOENIX_API_KEY``.
    """
    if source.startswith(("http://", "https://")):
        return _read_url(*_with_credentials(source, headers or {}))
    if source == "-":
        return parse_spans(sys.stdin.read(), notes)
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpanSourceError("no such file") from None
    except IsADirectoryError:
        raise SpanSourceError("is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise SpanSourceError(f"not UTF-8 text (byte {exc.start}): is it compressed?") from None
    except OSError as exc:
        raise SpanSourceError(exc.strerror or str(exc)) from None
    return parse_spans(text, notes)


def parse_spans(text: str, notes: list[str] | None = None) -> list[SpanRecord]:
    """Spans from the text of a file in any of the supported layouts (empty text: no spans)."""
    spans: list[SpanRecord] = []
    for where, document in _documents(text, notes if notes is not None else []):
        spans.extend(_from_document(document, where))
    return spans


# --- JSON documents in a text ---------------------------------------------------------------------
# where a document may start: at a line's start, or after the app's own text on the same line (its
# print and the console exporter's write sharing a line) where a console span or an OTLP request opens
_START = re.compile(r'^[{\[]|\{(?=\s*"(?:name|resourceSpans)"\s*:)', re.MULTILINE)
# how a span document opens: one that then does not parse was cut into, not the app's own text
_SPAN_OPENING = re.compile(r'\{\s*"(?:name|resourceSpans|data|result)"')


def _documents(text: str, notes: list[str]) -> Iterator[tuple[str, Any]]:
    """(where, document) for each span document in ``text``, in any layout: JSON Lines (one per
    line), pretty-printed documents back to back (``ConsoleSpanExporter``), or one document.

    What is not a span document is skipped and counted in one note: lines of the app's own output
    (text, a line starting with ``[``, JSON of its own), also where it shares a line with a span.
    A span document that does not parse is left out with a note naming its line (another writer
    cut into it); the last one, cut off at the end (a file still being written), likewise. Only
    when the text holds no span document at all is the first of these an error.
    """
    line_starts = [0, *(m.end() for m in re.finditer("\n", text))]

    def line_of(position: int) -> int:
        return bisect.bisect_right(line_starts, position)

    skipped: set[int] = set()  # lines with text outside every span document

    def skip(start: int, end: int) -> None:
        first = line_of(start)
        for offset, piece in enumerate(text[start:end].split("\n")):
            if piece.strip():
                skipped.add(first + offset)

    decoder = json.JSONDecoder()
    found = 0
    broken: list[tuple[int, json.JSONDecodeError]] = []  # (line, error) of span documents cut into
    cut: json.JSONDecodeError | None = None  # the last document's, cut off at the end
    foreign: tuple[str, Any] | None = None  # the first JSON document that is not trace data
    position = 0
    while (match := _START.search(text, position)) is not None:
        skip(position, match.start())
        start = match.start()
        try:
            document, position = decoder.raw_decode(text, start)
        except json.JSONDecodeError as exc:
            if not _SPAN_OPENING.match(text, start):
                position = start + 1  # "[INFO] ...": the app's own; a span may start later on its line
                skip(start, position)
                continue
            line_end = text.find("\n", start)
            position = len(text) if line_end < 0 else line_end + 1
            if _START.search(text, position) is None and _ran_out(text, exc):
                notes.append(f"line {line_of(start)} is cut off (a file still being written?): left out")
                cut, position = exc, len(text)
                break
            else:
                broken.append((line_of(start), exc))
            continue
        if _is_trace_document(document):
            found += 1
            yield f"line {line_of(start)}", document
        else:
            foreign = foreign or (f"line {line_of(start)}", document)
            skip(start, position)
    skip(position, len(text))
    if not found:
        if broken or cut:
            exc = broken[0][1] if broken else cut
            assert exc is not None
            raise SpanSourceError(f"line {exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})")
        if foreign is not None:
            _from_document(foreign[1], foreign[0])  # raises: what it is not
        if skipped:
            raise SpanSourceError(f"line {min(skipped)}: not JSON, and no span document anywhere in the text")
        return
    if broken:
        line, exc = broken[0]
        notes.append(
            f"{len(broken)} span document(s) that do not parse left out (another writer's output cut "
            f"into them?), the first at line {line}: invalid JSON: {exc.msg} (line {exc.lineno}, "
            f"column {exc.colno})"
        )
    if skipped:
        notes.append(
            f"{len(skipped)} line(s) outside the span documents skipped (the app's own output?), "
            f"the first at line {min(skipped)}"
        )


def _ran_out(text: str, exc: json.JSONDecodeError) -> bool:
    """Did the decoder run out of text (at its very end, or in a string running to it), rather than
    find an error inside?"""
    return exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")


def _is_trace_document(document: Any) -> bool:
    """Is ``document`` one of the shapes :func:`_from_document` reads (or another signal's)?"""
    if isinstance(document, list):
        return bool(document) and all(_is_trace_document(item) for item in document)
    if not isinstance(document, dict):
        return False
    result = document.get("result")
    return (
        "resourceSpans" in document
        or (isinstance(result, dict) and "resourceSpans" in result)
        or any(key in document for key in _OTHER_SIGNALS)
        or ("data" in document and (isinstance(document["data"], list) or "errors" in document))
        or ("name" in document and "context" in document)
    )


def _from_document(document: Any, where: str, path: str = "") -> list[SpanRecord]:
    """Spans of one decoded document, whichever of the known shapes it has."""
    if isinstance(document, list):
        spans: list[SpanRecord] = []
        for index, item in enumerate(document):
            spans.extend(_from_document(item, where, f"{path}[{index}]"))
        return spans
    if not isinstance(document, dict):
        raise _error(where, path or "document", f"expected an object, got {_kind(document)}")
    if "resourceSpans" in document:
        return _otlp_request(document, _Where(where, path))
    if isinstance(document.get("result"), dict) and "resourceSpans" in document["result"]:
        return _otlp_request(document["result"], _Where(where, _join(path, "result")))  # Jaeger /api/v3
    if any(key in document for key in _OTHER_SIGNALS):
        return []
    if "data" in document:
        return _data_response(document, _Where(where, path))
    if "name" in document and "context" in document:
        return [_console_span(document, _Where(where, path))]
    raise _error(
        where,
        path or "document",
        "not trace data: expected OTLP resourceSpans, a console-exporter span,"
        " or a Jaeger or Phoenix response",
    )


# --- field paths for error messages ---------------------------------------------------------------
@dataclass(frozen=True)
class _Where:
    """Where in the input a value sits: 'line 3' plus a field path like 'resourceSpans[0].name'."""

    origin: str
    path: str = ""

    def __truediv__(self, key: str | int) -> _Where:
        return _Where(self.origin, f"{self.path}[{key}]" if isinstance(key, int) else _join(self.path, key))

    def error(self, problem: str) -> SpanSourceError:
        return _error(self.origin, self.path or "document", problem)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _error(origin: str, path: str, problem: str) -> SpanSourceError:
    return SpanSourceError(f"{origin}: {path}: {problem}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _get(obj: Mapping[str, Any], key: str, where: _Where, types: type | tuple[type, ...]) -> Any:
    """A required field of the given JSON type."""
    if key not in obj or obj[key] is None:
        raise (where / key).error("missing")
    return _typed(obj[key], where / key, types)


def _opt(
    obj: Mapping[str, Any], key: str, where: _Where, types: type | tuple[type, ...], default: Any
) -> Any:
    """An optional field: absent or null gives ``default``; present must have the given type."""
    value = obj.get(key)
    return default if value is None else _typed(value, where / key, types)


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer"}


def _typed(value: Any, where: _Where, types: type | tuple[type, ...]) -> Any:
    wanted = types if isinstance(types, tuple) else (types,)
    # JSON true is not a number, though Python's bool is an int
    if not isinstance(value, wanted) or (isinstance(value, bool) and bool not in wanted):
        names = " or ".join(_TYPE_NAMES.get(t, "a number" if t is float else t.__name__) for t in wanted)
        raise where.error(f"expected {names}, got {_kind(value)}")
    return value


# --- OTLP/JSON ------------------------------------------------------------------------------------
def _otlp_request(request: Mapping[str, Any], where: _Where) -> list[SpanRecord]:
    """An OTLP/JSON request, read by ``json_format`` into opentelemetry-proto's message."""
    try:
        message = otlp_json.parse_request(request)
    except otlp_json.IdError as exc:
        raise (where / exc.path).error(exc.problem) from None
    except otlp_json.ParseError as exc:
        path, problem = _parse_error(str(exc))
        raise (where / path).error(problem) from None
    spans: list[SpanRecord] = []
    paths = [path for path, _ in otlp_json.span_paths(request)]
    flat = (s for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans)
    for path, span in zip(paths, flat, strict=True):
        if not span.name:
            raise (where / f"{path}.name").error("missing")
        spans.append(
            SpanRecord(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex() or None,
                name=span.name,
                start_ns=span.start_time_unix_nano or None,
                end_ns=span.end_time_unix_nano or None,
                status=_STATUS_CODES[span.status.code],
                attributes={kv.key: otlp_json.any_value(kv.value) for kv in span.attributes},
                links=tuple(link.span_id.hex() for link in span.links),
            )
        )
    return spans


def _parse_error(message: str) -> tuple[str, str]:
    """(field path, problem) from json_format's nested message, without the values it quotes."""
    fields = re.findall(r"Failed to parse (\w+) field: ", message)
    problem = re.split(r"Failed to parse \w+ field: ", message)[-1]
    located = re.search(r" at ExportTraceServiceRequest\.(\S+?)\.*$", problem)
    if located is not None:
        problem = problem[: located.start()]
        path = _join(located.group(1), fields[-1]) if fields else located.group(1)
    else:
        path = ".".join(fields)
    problem = re.sub(r" which is .*$", "", " ".join(problem.split()), flags=re.S).rstrip(".")
    return path, problem


# --- ConsoleSpanExporter (ReadableSpan.to_json) ---------------------------------------------------
def _console_span(span: Mapping[str, Any], where: _Where) -> SpanRecord:
    context = _get(span, "context", where, dict)
    status = _opt(span, "status", where, dict, {})
    links = _opt(span, "links", where, list, [])
    return SpanRecord(
        trace_id=_prefixed_hex(
            _get(context, "trace_id", where / "context", str), where / "context" / "trace_id"
        ),
        span_id=_prefixed_hex(
            _get(context, "span_id", where / "context", str), where / "context" / "span_id"
        ),
        parent_id=(
            _prefixed_hex(span["parent_id"], where / "parent_id")
            if isinstance(span.get("parent_id"), str)
            else None
        ),
        name=_get(span, "name", where, str),
        start_ns=_iso_nanos(span.get("start_time"), where / "start_time"),
        end_ns=_iso_nanos(span.get("end_time"), where / "end_time"),
        status=str(_opt(status, "status_code", where / "status", str, "UNSET")).removeprefix("STATUS_CODE_"),
        attributes=dict(_opt(span, "attributes", where, dict, {})),
        links=tuple(_console_link(link, where / "links" / n) for n, link in enumerate(links)),
    )


def _console_link(link: Any, where: _Where) -> str:
    context = _get(_typed(link, where, dict), "context", where, dict)
    return _prefixed_hex(_get(context, "span_id", where / "context", str), where / "context" / "span_id")


def _prefixed_hex(value: str, where: _Where) -> str:
    digits = value.lower().removeprefix("0x")
    try:
        bytes.fromhex(digits)
    except ValueError:
        raise where.error(f"expected a hex id, got {value!r}") from None
    return digits


def _iso_nanos(value: Any, where: _Where) -> int | None:
    """Unix ns from an ISO 8601 time (microsecond precision, as the console exporter and Phoenix write)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise where.error(f"expected an ISO 8601 time, got {_kind(value)}")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise where.error(f"expected an ISO 8601 time, got {value!r}") from None
    if moment.tzinfo is None:
        raise where.error(f"time {value!r} has no time zone")
    return math.floor(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


# --- Phoenix and Jaeger responses -----------------------------------------------------------------
def _data_response(document: Mapping[str, Any], where: _Where) -> list[SpanRecord]:
    """``{"data": [...]}``: Jaeger traces (items with ``spans``) or Phoenix spans (items with ``context``)."""
    data = document.get("data")
    if data is None:
        errors = document.get("errors") or []
        message = "; ".join(str(e.get("msg", e)) if isinstance(e, dict) else str(e) for e in errors)
        raise (where / "data").error(f"no data{f': {message}' if message else ''}")
    _typed(data, where / "data", list)
    spans: list[SpanRecord] = []
    for index, item in enumerate(data):
        at = where / "data" / index
        _typed(item, at, dict)
        if "spans" in item:
            spans.extend(_jaeger_trace(item, at))
        elif "context" in item:
            spans.append(_phoenix_span(item, at))
        else:
            raise at.error("neither a Jaeger trace (spans) nor a Phoenix span (context)")
    return spans


def _phoenix_span(span: Mapping[str, Any], where: _Where) -> SpanRecord:
    """A span of Phoenix's REST API. Phoenix keeps no links; attributes may come nested."""
    context = _get(span, "context", where, dict)
    parent = span.get("parent_id")
    return SpanRecord(
        trace_id=_prefixed_hex(
            _get(context, "trace_id", where / "context", str), where / "context" / "trace_id"
        ),
        span_id=_prefixed_hex(
            _get(context, "span_id", where / "context", str), where / "context" / "span_id"
        ),
        parent_id=_prefixed_hex(parent, where / "parent_id") if isinstance(parent, str) and parent else None,
        name=_get(span, "name", where, str),
        start_ns=_iso_nanos(span.get("start_time"), where / "start_time"),
        end_ns=_iso_nanos(span.get("end_time"), where / "end_time"),
        status=_opt(span, "status_code", where, str, "UNSET"),
        attributes=_flatten(_opt(span, "attributes", where, dict, {})),
    )


def _flatten(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _jaeger_trace(trace: Mapping[str, Any], where: _Where) -> list[SpanRecord]:
    spans: list[SpanRecord] = []
    for index, span in enumerate(_get(trace, "spans", where, list)):
        spans.append(_jaeger_span(span, where / "spans" / index))
    return spans


def _jaeger_span(span: Any, where: _Where) -> SpanRecord:
    """A span of Jaeger's query API: the first CHILD_OF reference is the parent, the rest are links."""
    _typed(span, where, dict)
    parent: str | None = None
    links: list[str] = []
    for n, reference in enumerate(_opt(span, "references", where, list, [])):
        at = where / "references" / n
        _typed(reference, at, dict)
        span_id = _prefixed_hex(_get(reference, "spanID", at, str), at / "spanID")
        if parent is None and reference.get("refType") == "CHILD_OF":
            parent = span_id
        else:
            links.append(span_id)
    tags: dict[str, Any] = {}
    for n, tag in enumerate(_opt(span, "tags", where, list, [])):
        at = where / "tags" / n
        _typed(tag, at, dict)
        tags[_get(tag, "key", at, str)] = tag.get("value")
    start_us = _opt(span, "startTime", where, int, None)
    duration_us = _opt(span, "duration", where, int, None)
    status = str(tags.pop("otel.status_code", "")).upper()
    if not status:
        status = "ERROR" if tags.get("error") is True else "UNSET"
    return SpanRecord(
        trace_id=_prefixed_hex(_get(span, "traceID", where, str), where / "traceID").rjust(32, "0"),
        span_id=_prefixed_hex(_get(span, "spanID", where, str), where / "spanID").rjust(16, "0"),
        parent_id=parent.rjust(16, "0") if parent else None,
        name=_get(span, "operationName", where, str),
        start_ns=start_us * 1000 if start_us is not None else None,
        end_ns=(start_us + duration_us) * 1000 if start_us is not None and duration_us is not None else None,
        status=status,
        attributes=tags,
        links=tuple(link.rjust(16, "0") for link in links),
    )


# --- HTTP -----------------------------------------------------------------------------------------
def _with_credentials(url: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """The URL without userinfo, and every header to send: basic auth from the userinfo, then a
    Phoenix URL's ``PHOENIX_API_KEY`` as a bearer token (as Phoenix's own client sends it), then
    the caller's headers, which win."""
    url, sent = split_userinfo(url)
    api_key = os.environ.get("PHOENIX_API_KEY", "").strip()
    if api_key and "/v1/projects/" in urllib.parse.urlsplit(url).path:
        sent["Authorization"] = f"Bearer {api_key}"
    given = {name.lower() for name in headers}
    sent = {name: value for name, value in sent.items() if name.lower() not in given}
    return url, {**sent, **headers}


def _read_url(url: str, headers: Mapping[str, str]) -> list[SpanRecord]:
    """Spans behind a URL, following Phoenix's ``next_cursor`` pages."""
    spans: list[SpanRecord] = []
    seen: set[str] = set()
    page_url = url
    for page in range(1, _MAX_PAGES + 1):
        document = _get_json(page_url, headers)
        origin = "response" if page == 1 else f"page {page}"
        spans.extend(_from_document(document, origin))
        cursor = document.get("next_cursor") if isinstance(document, dict) else None
        if not cursor or not isinstance(cursor, str) or cursor in seen:
            return spans
        seen.add(cursor)
        page_url = _with_query(url, cursor=cursor)
    raise SpanSourceError(f"more than {_MAX_PAGES} pages: narrow the query (a larger limit, fewer spans)")


def _get_json(url: str, headers: Mapping[str, str]) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=_HTTP_TIMEOUT) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise SpanSourceError(
                f"HTTP {exc.code} {exc.reason}: the backend wants credentials; give them with "
                "--header 'Authorization=Bearer …' (or OTEL_HANDOFF_SUMMARY_HEADERS), PHOENIX_API_KEY "
                "for Phoenix, or user:password@ in the URL for basic auth"
            ) from None
        raise SpanSourceError(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise SpanSourceError(f"cannot connect: {exc.reason}") from None
    except (OSError, ValueError) as exc:
        raise SpanSourceError(f"cannot read: {exc}") from None
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpanSourceError(f"the response is not JSON: {exc}") from None


def _with_query(url: str, **params: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    query.update(params)
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
