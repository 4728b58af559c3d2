"""The per-phase metrics switch (issue 29, decision 1): off means no phase points; the handoffs'
own duration points and every span are unchanged. On by default."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("langgraph_swarm", reason="the switch is shown on LangGraph handoffs")

from otel_handoff.cli.offline import langgraph as lg
from otel_handoff.core import schema as sc
from otel_handoff.langgraph import LangGraphHandoffInstrumentor


def points(reader: Any) -> dict[str, int]:
    """Data points per metric name, read (and reset) from the reader."""
    found: dict[str, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = found.get(metric.name, 0) + len(metric.data.data_points)
    return found


def handoff_spans(spans: Any) -> list[tuple[str, dict[str, Any]]]:
    volatile = (sc.DURATION, sc.GEN_AI_TOOL_CALL_ID)
    return sorted(
        (s.name, {k: v for k, v in s.attributes.items() if not k.endswith(".duration") and k not in volatile})
        for s in spans.all()
        if s.name.startswith(sc.SPAN_HANDOFF)
    )


def run_swarm() -> None:
    asyncio.run(lg.run_async(lg.swarm(triage_latency=0.0, billing_latency=0.0)))


@pytest.mark.parametrize("how", ["argument", "variable"])
def test_off_records_no_phase_points_and_changes_no_span(
    instrument: Any, spans: Any, metric_reader: Any, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    instrumentor = instrument(LangGraphHandoffInstrumentor)
    run_swarm()
    on_points, on_spans = points(metric_reader), handoff_spans(spans)
    instrumentor.uninstrument()
    spans._exporter.clear()
    if how == "argument":
        instrument(LangGraphHandoffInstrumentor, phase_metrics=False)
    else:
        monkeypatch.setenv("OTEL_HANDOFF_PHASE_METRICS", "false")
        instrument(LangGraphHandoffInstrumentor)
    run_swarm()
    off_points, off_spans = points(metric_reader), handoff_spans(spans)
    assert on_points[sc.METRIC_PHASE_DURATION] == 4  # handler, context_update, start, first_output
    assert sc.METRIC_PHASE_DURATION not in off_points
    assert off_points[sc.METRIC_DURATION] == on_points[sc.METRIC_DURATION] == 1
    assert off_spans == on_spans


def test_a_bad_value_says_so_once_and_keeps_them_on(
    instrument: Any, metric_reader: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_handoff.export.settings import report_problem

    report_problem.reset()
    monkeypatch.setenv("OTEL_HANDOFF_PHASE_METRICS", "nope")
    with caplog.at_level(logging.WARNING, logger="otel_handoff"):
        instrument(LangGraphHandoffInstrumentor)
        run_swarm()
    [line] = [r.getMessage() for r in caplog.records if "OTEL_HANDOFF_PHASE_METRICS" in r.getMessage()]
    assert "'nope'" in line and "use true or false" in line
    assert points(metric_reader)[sc.METRIC_PHASE_DURATION] == 4


CONFIGURED_APP = """
import asyncio, otel_handoff
otel_handoff.configure(phase_metrics=False)
from otel_handoff.cli.offline import langgraph as lg
asyncio.run(lg.run_async(lg.swarm(triage_latency=0.0, billing_latency=0.0)))
"""


def test_configure_passes_it_to_every_instrumentor() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "console"}
    result = subprocess.run(
        [sys.executable, "-c", CONFIGURED_APP], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f'"name": "{sc.METRIC_DURATION}"' in result.stdout
    assert sc.METRIC_PHASE_DURATION not in result.stdout
