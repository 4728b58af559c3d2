"""Every framework: a conversation cut short, a handoff maybe in flight, leaves nothing of ours.

Each framework's offline scenario (``bench/frameworks_overhead.py``'s: the demos' runs) runs on
a loop of its own and is cancelled after a given number of loop turns, at five points spread over
its run (a handoff requested, switching, awaiting its first output, …); then what is left on the
loop is cancelled and the loop closed, as ``asyncio.run`` ends. Run plain, then instrumented,
twice over: asyncio reports the same to the app both ways, no span of ours stays open, and the
second identical batch leaves no more objects of ours than the first. LiveKit's own, with many
sessions and threads: ``test_livekit_leaks.py``.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from support import OpenSpans

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))  # the scenarios live there
import frameworks_overhead

from otel_handoff.core.conversation import Conversations
from otel_handoff.core.spans import _OPEN_ROOTS

SCENARIOS = frameworks_overhead._scenarios()
CUTS = 5  # points in a run where it is cut short


def run(scenario: frameworks_overhead.Scenario, cut: int | None, reports: list[str]) -> int:
    """The scenario on a new loop, cancelled after ``cut`` loop turns (None: run to its end);
    returns the turns it ran. What the loop reports to its exception handler goes to ``reports``."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.set_exception_handler(lambda _, context: reports.append(_report(context)))
    turns = 0
    try:
        task = loop.create_task(scenario.run())
        while not task.done() and (cut is None or turns < cut):
            loop.run_until_complete(asyncio.sleep(0))  # one turn of the loop
            turns += 1
        task.cancel()
        loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        left = asyncio.all_tasks(loop)
        for other in left:
            other.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return turns


def _report(context: dict[str, Any]) -> str:
    error = context.get("exception")
    return f"{context['message']}: {type(error).__name__ if error else None}"


def cut_short(scenario: frameworks_overhead.Scenario, cuts: list[int]) -> Counter[str]:
    reports: list[str] = []
    for cut in cuts:
        run(scenario, cut, reports)
    gc.collect()  # tasks never retrieved are reported as they are collected
    return Counter(reports)


def ours_alive() -> Counter[str]:
    """Objects of ours, less the conversations a framework names by id (an ADK session, a LangGraph
    thread): those are remembered on purpose, their count going on across runs, the most recent
    4,096 (``core.conversation.Conversations``)."""
    gc.collect()
    objects = gc.get_objects()
    found = Counter(
        type(obj).__qualname__
        for obj in objects
        if str(getattr(type(obj), "__module__", "")).startswith("otel_handoff.")
    )
    named = sum(len(obj._known) for obj in objects if isinstance(obj, Conversations))
    return found - Counter({"Conversation": named})


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: f"{s.framework}: {s.what}")
def test_a_conversation_cut_short_leaves_nothing_of_ours(
    scenario: frameworks_overhead.Scenario,
    provider: TracerProvider,
    meter_provider: MeterProvider,
    open_spans: OpenSpans,
) -> None:
    full = run(scenario, None, [])
    cuts = sorted({max(1, full * k // (CUTS + 1)) for k in range(1, CUTS + 1)})
    plain = cut_short(scenario, cuts)
    instrumentor = scenario.instrumentor()
    instrumentor.instrument(tracer_provider=provider, meter_provider=meter_provider, skip_dep_check=True)
    try:
        traced = cut_short(scenario, cuts)
        first = ours_alive()
        cut_short(scenario, cuts)
        second = ours_alive()
        still_open = [span.name for span in open_spans.ours()]
        roots = len(_OPEN_ROOTS)
    finally:
        instrumentor.uninstrument()
    assert traced == plain, "asyncio reported something else to the app"
    assert second - first == Counter(), "a second identical batch kept more objects of ours"
    assert still_open == [] and roots == 0, "a span of ours left open"
