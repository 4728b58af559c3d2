"""OTLP/JSON, read and written with ``google.protobuf.json_format`` and opentelemetry-proto.

OTLP/JSON is protobuf's JSON mapping of ``ExportTraceServiceRequest`` with one difference that
matters here: trace and span ids are hex strings, where the plain mapping writes bytes as base64
(https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding). Everything else is left to
``json_format``: one reader and one writer, used by the file exporter (:mod:`.file`), the demo's
export, ``otel-handoff summary`` and the tests.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["IdError", "any_value", "encode", "json_lines", "parse_request", "span_paths"]

_ID_SIZES = {"traceId": 16, "spanId": 8, "parentSpanId": 8}

ParseError = json_format.ParseError


class IdError(ValueError):
    """An id that is neither hex (OTLP/JSON) nor base64 (protobuf JSON) of the right size."""

    def __init__(self, path: str, size: int, value: Any) -> None:
        self.path = path
        self.problem = f"expected a {2 * size}-digit hex id, got {value!r}"
        super().__init__(f"{path}: {self.problem}")


def span_paths(document: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(field path, span object) of every span of an OTLP/JSON request, for messages and fixes."""
    for r, resource_spans in enumerate(_list(document, "resourceSpans")):
        for s, scope_spans in enumerate(_list(resource_spans, "scopeSpans")):
            for i, span in enumerate(_list(scope_spans, "spans")):
                yield f"resourceSpans[{r}].scopeSpans[{s}].spans[{i}]", span


def parse_request(document: Mapping[str, Any]) -> ExportTraceServiceRequest:
    """An OTLP/JSON request as protobuf. Raises :class:`IdError` or ``json_format.ParseError``."""
    copied: dict[str, Any] = copy.deepcopy(dict(document))  # ids rewritten in place
    for path, span in span_paths(copied):
        if not isinstance(span, dict):
            continue  # json_format names what is wrong with it
        _ids_to_base64(span, path)
        for n, link in enumerate(_list(span, "links")):
            if isinstance(link, dict):
                _ids_to_base64(link, f"{path}.links[{n}]")
    return json_format.ParseDict(copied, ExportTraceServiceRequest(), ignore_unknown_fields=True)


def encode(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Finished SDK spans as one OTLP/JSON request (hex ids), as the Collector's file exporter writes."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    document = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for _, span in span_paths(document):
        _ids_to_hex(span)
        for link in span.get("links", ()):
            _ids_to_hex(link)
    return document


def json_lines(spans: Sequence[ReadableSpan]) -> list[str]:
    """OTLP JSON Lines of ``spans``: one request per trace, in the order the traces started.

    The layout of the Collector's file exporter, so a file can be replayed into a collector
    (``otlpjsonfile`` receiver) or read by anything that speaks OTLP/JSON; each line ends in ``\\n``.
    """
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return [json.dumps(encode(group), separators=(",", ":")) + "\n" for group in by_trace.values()]


def any_value(value: AnyValue) -> Any:
    """A plain Python value from an OTLP ``AnyValue`` (an empty one is protobuf's default: None)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def _ids_to_base64(obj: dict[str, Any], path: str) -> None:
    for key, size in _ID_SIZES.items():
        value = obj.get(key)
        if value in (None, ""):
            continue
        if not isinstance(value, str):
            raise IdError(f"{path}.{key}", size, value)
        if len(value) == 2 * size:
            try:
                obj[key] = base64.b64encode(bytes.fromhex(value)).decode()
                continue
            except ValueError:
                pass
        try:  # the plain protobuf mapping (base64), which some writers use
            valid = len(base64.b64decode(value, validate=True)) == size
        except (binascii.Error, ValueError):
            valid = False
        if not valid:
            raise IdError(f"{path}.{key}", size, value)


def _ids_to_hex(obj: dict[str, Any]) -> None:
    for key in _ID_SIZES:
        if obj.get(key):
            obj[key] = base64.b64decode(obj[key]).hex()
