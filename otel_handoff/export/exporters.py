"""Which exporters ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` ask for, built by entry point.

Each is looked up in the SDK's entry-point groups and constructed without arguments, so it reads
its own ``OTEL_EXPORTER_*`` settings; each is wrapped to log a failing receiver once.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter

from .credentials import redact
from .file import EXPORTER_NAME, OtlpJsonFileSpanExporter
from .quiet import quiet
from .settings import (
    EXPORTER_VARIABLE,
    OTLP_BY_PROTOCOL,
    PROTOCOL_BY_OTLP,
    Problem,
    Signal,
    otlp_settings,
    report_problem,
)

_ENTRY_POINT_GROUP: dict[Signal, str] = {
    "traces": "opentelemetry_traces_exporter",
    "metrics": "opentelemetry_metrics_exporter",
}

# what each variable takes without another package: the SDK's, and ours for a file of spans
_ACCEPTED: dict[Signal, str] = {
    "traces": f"otlp, console, {EXPORTER_NAME} or none",
    "metrics": "otlp, console or none",
}


def _exporter_class(signal: Signal, name: str) -> type[Any] | None:
    for entry_point in entry_points(group=_ENTRY_POINT_GROUP[signal], name=name):
        return entry_point.load()
    return None


def build_exporters(signal: Signal) -> list[tuple[str, Any]]:
    """(description, exporter) for each exporter OTEL_{TRACES,METRICS}_EXPORTER names."""
    variable = EXPORTER_VARIABLE[signal]
    names = [n.strip().lower() for n in os.environ.get(variable, "").split(",") if n.strip()] or ["otlp"]
    built: list[tuple[str, Any]] = []
    for name in dict.fromkeys(names):
        if name == "none":
            continue
        if name == "otlp" or name in PROTOCOL_BY_OTLP:
            settings = otlp_settings(signal, PROTOCOL_BY_OTLP.get(name))
            if settings is None:
                continue
            protocol, target = settings
            entry_name, description = OTLP_BY_PROTOCOL[protocol], f"otlp/{protocol} {redact(target)}"
        else:
            entry_name, description, target = name, name, name
        cls = _exporter_class(signal, entry_name)
        if cls is None:
            installed = sorted({ep.name for ep in entry_points(group=_ENTRY_POINT_GROUP[signal])})
            report_problem(
                variable,
                f"names {name!r}, which is not installed",
                f"use {_ACCEPTED[signal]} (installed: {', '.join(installed) or 'none'})",
                f"That {signal} exporter is off",
            )
            continue
        try:
            exporter = cls()  # each reads its own OTEL_EXPORTER_* settings
        except Exception as exc:
            report_problem(
                variable,
                f"selects {name!r}, which failed to start ({type(exc).__name__}: {exc})",
                "check that exporter's OTEL_EXPORTER_* settings",
                f"That {signal} exporter is off",
            )
            continue
        if isinstance(exporter, OtlpJsonFileSpanExporter):
            if not exporter.writable:
                continue  # no usable path: it said so in one line
            description = target = f"{name} {exporter.path}"
        built.append((description, quiet(signal, exporter, target)))
    return built


def problems() -> list[Problem]:
    """The settings the last set-up (:func:`configure`, :func:`exporters`) could not use."""
    return list(report_problem.found)


def exporters(
    *, build: bool = True, log: bool = True
) -> tuple[list[tuple[str, SpanExporter]], list[tuple[str, MetricExporter]]]:
    """Span and metric exporters together, each bad setting reported once for both.

    ``build=False`` only checks the settings (each problem still reported once) and builds
    nothing: for a program that exports only when an endpoint is set. ``log=False`` logs
    nothing: :func:`problems` then says what is wrong.
    """
    report_problem.reset(log=log)
    if not build:
        for signal in ("traces", "metrics"):
            otlp_settings(signal, None)
        return [], []
    return build_exporters("traces"), build_exporters("metrics")
