"""What a long run of LiveKit handoffs leaves in memory, per handoff, with and without us (issue 50).

Rounds of real offline ``AgentSession``\\ s, on several event loops in threads as LiveKit's
``thread`` job executor runs jobs: each session hands off ``--handoffs`` times (``update_agent()``
from code, a queued handoff, ``on_enter`` and ``on_exit`` hooks that raise or sleep), then ends
with a handoff in flight (closed, or dropped to the loop's end). After each round everything is
dropped and collected, and the memory Python holds is read (``tracemalloc``). The figure is the
slope over the rounds after the first, per handoff: **A** not instrumented, **C** instrumented on
an SDK ``TracerProvider`` whose spans go to an exporter that drops them. Goal: C - A ≤ 0 bytes a
handoff within the run's noise (``GOAL_BYTES``), no object of ours left, no session kept.

    python bench/memory_per_handoff.py            # 12 rounds of 40 sessions, about 9,000 handoffs a variant
    python bench/memory_per_handoff.py --quick    # 4 rounds: a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import time
import tracemalloc
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from livekit.agents import Agent, AgentSession
from livekit.agents import __version__ as livekit_version
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracerProvider

from otel_handoff.cli.offline.livekit import ScriptedLLM
from otel_handoff.core.emit import Emitted
from otel_handoff.core.record import HandoffRecord, PhaseRecord
from otel_handoff.livekit import LiveKitHandoffInstrumentor
from otel_handoff.livekit._handoff import LiveKitHandoff

RESULTS = Path(__file__).resolve().parent / "results"
THREADS = 4
SESSIONS_PER_THREAD = 10
# bytes a handoff may leave behind, C - A: the slope's noise (allocator pools, interned names) on a
# run of this size is a few bytes a handoff either way; a leak is kilobytes (3.7 KB, issue 50)
GOAL_BYTES = 32
OURS = (LiveKitHandoff, HandoffRecord, PhaseRecord, Emitted)


class Desk(Agent):
    """An agent whose on_enter / on_exit raise or sleep, as scripted."""

    def __init__(self, *, enter: str = "", exit: str = "") -> None:
        super().__init__(instructions="Help.")
        self._enter, self._exit = enter, exit

    async def on_enter(self) -> None:
        await _hook(self._enter)

    async def on_exit(self) -> None:
        await _hook(self._exit)


async def _hook(kind: str) -> None:
    if kind == "raise":
        raise RuntimeError("hook failed")
    if kind == "sleep":
        await asyncio.sleep(0.001)
    if kind == "hold":
        await asyncio.Event().wait()  # until the loop's end cancels it


class _Drop(SpanExporter):
    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def _session(index: int, handoffs: int, sessions: weakref.WeakSet[Any]) -> int:
    """One session's handoffs (``handoffs`` asked for: the last one in flight at its end)."""
    session = AgentSession(llm=ScriptedLLM())
    sessions.add(session)
    await session.start(agent=Desk())
    hooks = (("", ""), ("sleep", ""), ("raise", ""), ("", "raise"), ("", "sleep"))
    asked = 0
    while asked < handoffs - 1:
        enter, exit = hooks[asked % len(hooks)]
        session.update_agent(Desk(enter=enter, exit=exit))
        asked += 1
        if asked % 4 == 0 and asked < handoffs - 1:
            session.update_agent(Desk())  # queued behind the one before
            asked += 1
        await asyncio.wait([session._update_activity_atask])
        on_enter = session._activity._on_enter_task if session._activity else None
        if on_enter is not None:
            await asyncio.wait([on_enter])
    if index % 2:
        session.update_agent(Desk())
        await session.aclose()  # a handoff in flight
    else:
        session.update_agent(Desk(enter="hold"))  # dropped: the loop's end cancels it
    return asked + 1


def _round(handoffs: int) -> tuple[int, int]:
    """One round: the handoffs asked for, and the sessions still alive once it is dropped and collected."""
    sessions: weakref.WeakSet[Any] = weakref.WeakSet()

    def loop(first: int) -> int:
        async def run() -> list[int]:
            return await asyncio.gather(
                *(_session(first + n, handoffs, sessions) for n in range(SESSIONS_PER_THREAD))
            )

        return sum(asyncio.run(run()))

    with ThreadPoolExecutor(THREADS) as pool:
        asked = sum(f.result() for f in [pool.submit(loop, t * SESSIONS_PER_THREAD) for t in range(THREADS)])
    gc.collect()
    return asked, len(sessions)


def _slope(points: list[tuple[int, int]]) -> float:
    """Least squares: bytes per handoff."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)


def _variant(name: str, rounds: int, handoffs: int) -> dict[str, Any]:
    instrumentor = None
    if name == "C":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_Drop()))
        instrumentor = LiveKitHandoffInstrumentor()
        instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
    points: list[tuple[int, int]] = []
    kept: list[int] = []
    done = 0
    started = time.monotonic()
    try:
        _round(handoffs)  # a warm-up: LiveKit's and asyncio's caches, pools and interned names
        gc.collect()
        tracemalloc.start()
        for _ in range(rounds):
            asked, alive = _round(handoffs)
            done += asked
            kept.append(alive)
            gc.collect()
            points.append((done, tracemalloc.get_traced_memory()[0]))
        tracemalloc.stop()
        ours = sum(1 for obj in gc.get_objects() if isinstance(obj, OURS))
        telemetry = instrumentor._telemetry if instrumentor is not None else None
        tables = (
            sum(len(getattr(telemetry, t)) for t in ("sequences", "awaiting_speech", "reconnect_watch"))
            if telemetry is not None
            else 0
        )
    finally:
        if instrumentor is not None:
            instrumentor.uninstrument()
    steady = points[1:]  # the first traced round still fills what tracemalloc itself keeps
    return {
        "variant": name,
        "handoffs": done,
        "bytes_per_handoff": round(_slope(steady), 1),
        "held_after_first_round": points[0][1],
        "held_at_end": points[-1][1],
        "sessions_kept": max(kept),
        "objects_of_ours": ours,
        "table_entries": tables,
        "seconds": round(time.monotonic() - started, 1),
    }


def _render(result: dict[str, Any]) -> str:
    a, c = result["A"], result["C"]
    lines = [
        f"`python bench/memory_per_handoff.py` — {result['when']}, livekit-agents {result['livekit']}, "
        f"CPython {result['python']}",
        "",
        f"{result['rounds']} rounds of {THREADS * SESSIONS_PER_THREAD} sessions on {THREADS} loops "
        f"(threads), {result['handoffs_per_session']} handoffs a session, each round dropped and collected.",
        "",
        "| variant | handoffs | held per handoff, bytes (slope) | sessions kept | objects of ours "
        "| table entries |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row, label in ((a, "A, not instrumented"), (c, "C, instrumented")):
        lines.append(
            f"| {label} | {row['handoffs']:,} | {row['bytes_per_handoff']:.1f} | {row['sessions_kept']} | "
            f"{row['objects_of_ours']} | {row['table_entries']} |"
        )
    verdict = "✅" if result["difference"] <= GOAL_BYTES else "❌"
    lines += ["", f"C - A: {result['difference']:.1f} bytes a handoff (goal ≤ {GOAL_BYTES}) {verdict}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 rounds: a smoke run")
    parser.add_argument("--handoffs", type=int, default=20, help="handoffs a session")
    options = parser.parse_args()
    rounds = 4 if options.quick else 12
    from livekit.agents.telemetry import set_tracer_provider

    set_tracer_provider(NoOpTracerProvider())  # LiveKit's own spans are not what this measures
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "livekit": livekit_version,
        "python": platform.python_version(),
        "rounds": rounds,
        "handoffs_per_session": options.handoffs,
    }
    for name in ("A", "C"):
        result[name] = _variant(name, rounds, options.handoffs)
        print(json.dumps(result[name]))
    result["difference"] = round(result["C"]["bytes_per_handoff"] - result["A"]["bytes_per_handoff"], 1)
    text = _render(result)
    print(text)
    name = "memory_quick" if options.quick else "memory"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text("# Memory over a long run (LiveKit)\n\n" + text)


if __name__ == "__main__":
    main()
