"""Pipecat, run offline and traced: ``otel-handoff demo --framework pipecat``.

First a Flows conversation: a real ``PipelineWorker`` with a real context aggregator; only the
model, the TTS and the output stage are scripted (:mod:`otel_handoff.cli.offline.pipecat_flows`).
The caller asks for a booking: the model calls ``go_to_booking``, whose node says "One moment" (a
``tts_say`` pre-action that plays in real time) and resets the context; then the app moves the
call on from code. Then a bot split into workers (:mod:`otel_handoff.cli.offline.pipecat_workers`):
triage, still speaking, hands the caller to billing with ``activate_worker(deactivate_self=True)``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from typing import Any

try:  # Pipecat's logger, quieted before Pipecat is imported: the demo prints its own output only
    from loguru import logger

    logger.disable("pipecat")
except ImportError:  # no Pipecat: the import below says so
    pass

# (after the logger is quieted: importing Pipecat logs its banner)
from pipecat.flows import ContextStrategy, ContextStrategyConfig, FlowsFunctionSchema

from ..pipecat import PipecatHandoffInstrumentor
from .demo_export import DemoResult, DemoTracing
from .offline import pipecat_flows as pf
from .offline import pipecat_workers as pw

__all__ = ["run_pipecat_demo"]


def _booking() -> dict[str, Any]:
    return {
        "name": "booking",
        "task_messages": [{"role": "developer", "content": "Book the appointment."}],
        "pre_actions": [{"type": "tts_say", "text": "One moment please."}],
        "context_strategy": ContextStrategyConfig(strategy=ContextStrategy.RESET),
    }


async def _go_to_booking(args: dict[str, Any], flow_manager: Any) -> tuple[Any, Any]:
    return {"status": "ok"}, _booking()


def _greeting() -> dict[str, Any]:
    return {
        "name": "greeting",
        "task_messages": [{"role": "developer", "content": "Greet the caller."}],
        "functions": [
            FlowsFunctionSchema(
                name="go_to_booking", description="Book", properties={}, required=[], handler=_go_to_booking
            )
        ],
    }


async def _to_wrap_up(flow_manager: Any, worker: Any) -> None:
    await pf.node_reached(flow_manager, "booking")
    await flow_manager.set_node_from_config(
        {"name": "wrap_up", "task_messages": [{"role": "developer", "content": "Say goodbye."}]}
    )


@contextlib.contextmanager
def _without_pipecats_deprecations() -> Iterator[None]:
    """Flows' own ``tts_say`` action has the handler signature Flows deprecates: not the demo's to fix.

    Pipecat raises its deprecations under an ``always`` filter, so they are caught and dropped
    here; any other warning is raised again as it was.
    """
    with warnings.catch_warnings(record=True) as caught:
        yield
    for warning in caught:
        if issubclass(warning.category, DeprecationWarning) and "/pipecat/" in warning.filename:
            continue
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


async def run_pipecat_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    tracing = DemoTracing.create(export_path)
    with tracing.instrumented(PipecatHandoffInstrumentor(), "Pipecat"), _without_pipecats_deprecations():
        await pf.run_flow(
            _greeting(),
            ["Hello, how can I help?", [("go_to_booking", {})], "Booked for Tuesday.", "Goodbye."],
            [pf.user_says("I'd like to book"), _to_wrap_up],
            until=lambda fm: fm.current_node == "wrap_up",
            paced=True,
        )
        await pw.run_workers(
            {
                "triage": [
                    "Hello, triage here.",
                    ("Let me get you to billing.", [("transfer_to", {"agent": "billing"})]),
                ],
                "billing": ["Billing here, how can I help?"],
            },
            ["hi", "my bill is wrong"],
            until_active="billing",
        )
    return tracing.result()
