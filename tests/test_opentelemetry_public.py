"""otel-handoff uses opentelemetry-api, -sdk and the exporters through their public names only:
a private name (``_SPAN_KEY``, ``ProxyTracer._tracer``, ``BatchSpanProcessor`` internals) can
move in any release, and the app's SDK is whatever release the app pinned.

The private names are read off the installed opentelemetry packages themselves (classes, functions,
module globals, attributes their classes set), then every module of ``otel_handoff/`` is parsed:
an import of one, an attribute of that name on anything but ``self``/``cls``, a ``getattr`` of it or
its class name in a string fails, unless ``ALLOWED`` says why there is no public route.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import opentelemetry.trace
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

PACKAGE = Path(__file__).resolve().parents[1] / "otel_handoff"
OPENTELEMETRY = Path(opentelemetry.trace.__file__).resolve().parents[1]

# (file under otel_handoff/, private name): why no public name does it
ALLOWED = {
    # the API offers no "is a meter provider set" and set_meter_provider() warns when one is; LiveKit's
    # telemetry checks the same class name
    ("export/__init__.py", "_ProxyMeterProvider"),
    # MetricExporter has no public reader of what it prefers, and the SDK's own periodic reader reads
    # these two off its exporter: the quiet wrapper must hand the wrapped exporter's on
    ("export/quiet.py", "_preferred_temporality"),
    ("export/quiet.py", "_preferred_aggregation"),
}
# private names of frameworks' own objects, spelled like one of opentelemetry's (not opentelemetry's)
FRAMEWORKS_OWN = {
    ("core/instrumentor.py", "_instruments"),  # our own package.py's, as contrib's instrumentations name it
    ("livekit/_wrappers.py", "_session"),  # LiveKit's AgentActivity
    ("pipecat/_downlink.py", "_client"),  # Pipecat's WebRTC transport
    ("pipecat/_downlink.py", "_transport"),  # Pipecat's media sender
    ("pipecat/_workers.py", "_registry"),  # Pipecat's worker: the bus's known workers
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def opentelemetry_private_names() -> set[str]:
    """Every private name the installed opentelemetry packages define."""
    names: set[str] = set()
    for source in OPENTELEMETRY.rglob("*.py"):
        if "instrumentation" in source.parts:  # contrib's instrumentations: not the API, SDK or exporters
            continue
        names.update(
            part for part in source.relative_to(OPENTELEMETRY).with_suffix("").parts if _private(part)
        )
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)  # self._x = ...
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {name for name in names if _private(name)}


_BY_NAME = ("getattr", "hasattr", "setattr")


def uses(tree: ast.AST, private: set[str]) -> Iterator[tuple[int, str]]:
    """(line, name) of every use of one of ``private`` in a module of ours."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opentelemetry"):
            for part in [*(node.module or "").split("."), *(alias.name for alias in node.names)]:
                if _private(part):
                    yield node.lineno, part
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("opentelemetry"):
                    yield from ((node.lineno, part) for part in alias.name.split(".") if _private(part))
        elif isinstance(node, ast.Attribute) and node.attr in private:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                yield node.lineno, node.attr
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "getattr",
            "hasattr",
            "setattr",
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in private:
                yield node.lineno, name.value
        elif isinstance(node, ast.Compare):  # type(x).__name__ == "_Proxy…"
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in private:
                    yield node.lineno, side.value


def test_no_private_name_of_opentelemetry_is_used() -> None:
    private = opentelemetry_private_names()
    assert {"_SPAN_KEY", "_tracer", "_ProxyMeterProvider", "_active_span_processor"} <= private  # read right
    found = []
    for module in sorted(PACKAGE.rglob("*.py")):
        where = module.relative_to(PACKAGE).as_posix()
        for line, name in uses(ast.parse(module.read_text(encoding="utf-8")), private):
            if (where, name) not in ALLOWED | FRAMEWORKS_OWN:
                found.append(f"otel_handoff/{where}:{line}: {name}")
    assert found == [], "\n".join(found)


def test_every_allowance_is_still_needed() -> None:
    private = opentelemetry_private_names()
    used = {
        (module.relative_to(PACKAGE).as_posix(), name)
        for module in PACKAGE.rglob("*.py")
        for _, name in uses(ast.parse(module.read_text(encoding="utf-8")), private)
    }
    assert used >= ALLOWED | FRAMEWORKS_OWN


def test_the_parent_span_is_read_as_the_api_reads_it() -> None:
    """emit reads a Context's span in C under the key the API's set_span_in_context writes: the
    same span as trace.get_current_span, and no span where the Context holds none."""
    from otel_handoff.core import emit

    span = trace.NonRecordingSpan(trace.SpanContext(1, 2, False))
    inside = trace.set_span_in_context(span, otel_context.Context())
    assert emit._span_of(inside) is span is trace.get_current_span(inside)
    for empty in (otel_context.Context(), otel_context.set_value("other", 1, otel_context.Context())):
        assert emit._span_of(empty) in (None, trace.INVALID_SPAN)


@pytest.mark.parametrize(
    ("global_provider", "never"),
    [(trace.ProxyTracerProvider(), True), (trace.NoOpTracerProvider(), True), (TracerProvider(), False)],
    ids=["none set", "NoOp", "SDK"],
)
def test_a_proxy_tracer_records_once_a_real_provider_is_set(
    global_provider: trace.TracerProvider, never: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's ProxyTracer (instrumented before the app set a provider) is read through the
    public global provider: nothing is built for a handoff until a recording one is set."""
    from otel_handoff.core import emit

    monkeypatch.setattr(trace, "get_tracer_provider", lambda: global_provider)
    assert emit._never_records(trace.ProxyTracerProvider().get_tracer("x")) is never
    assert emit._never_records(trace.NoOpTracer()) and not emit._never_records(
        TracerProvider().get_tracer("x")
    )
