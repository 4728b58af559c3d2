"""Real ag2 1.x workflow channels, run offline and traced: ``otel-handoff demo --framework ag2``.

A real ``Hub`` folds, routes and closes the channels; only the model's replies are scripted
(:mod:`otel_handoff.cli.offline.ag2_network`). AG2's own tracing is on, so the handoff spans sit
under AG2's ``network.envelope`` spans in one trace per channel.
"""

from __future__ import annotations

import os

from ..ag2 import AG2HandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline.ag2_network import demo_workflow

__all__ = ["run_ag2_demo"]


async def run_ag2_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run a tool handoff ending in ``Finish`` and a rule-driven ping-pong; return their spans."""
    tracing = DemoTracing.create(export_path)
    with tracing.instrumented(AG2HandoffInstrumentor(), "AG2"):
        labels = await demo_workflow(tracer_provider=tracing.provider)
    return tracing.result(labels=labels)
