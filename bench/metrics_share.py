"""Our Python work around the SDK's metric ``record`` calls, against what those calls cost (issue 29).

Each framework's offline scenario (the ones ``frameworks_overhead.py`` runs) is traced on an SDK
``TracerProvider`` twice: with NoOp meters and with an SDK ``MeterProvider``, phase metrics on.
With NoOp meters our metrics code does not run at all; with SDK meters, the opcodes in
``otel_handoff/core/metrics.py`` are ours, and what the run adds in opentelemetry's own files is
the SDK recording (instruments, views, aggregation, exemplars, attribute cleaning). Goal: ours
≤ 10 % of the SDK's.

    python bench/metrics_share.py
    .venv-google-adk/bin/python bench/metrics_share.py      # Google ADK (its own environment)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
from typing import Any

from frameworks_overhead import Scenario, _scenarios, opcodes, publish  # run from bench/, as its siblings are
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

GOAL = 0.10
OURS = "otel_handoff/core/metrics.py"
_SDK = "/opentelemetry/"


def _by_file(scenario: Scenario, meter_provider: Any) -> collections.Counter[str]:
    """Opcodes per source file of one instrumented run (after a warm-up run)."""
    instrumentor = scenario.instrumentor()
    instrumentor.instrument(
        tracer_provider=TracerProvider(), meter_provider=meter_provider, skip_dep_check=True
    )
    counts: collections.Counter[str] = collections.Counter()
    try:
        asyncio.run(scenario.run())
        opcodes(lambda: asyncio.run(scenario.run()), by_file=counts)
    finally:
        instrumentor.uninstrument()
    return counts


def _livekit() -> list[Scenario]:
    """LiveKit's handoffs: ``update_agent`` in an offline session (``handoff_overhead.py``'s kind)."""
    try:
        from livekit.agents import Agent, AgentSession

        from otel_handoff.cli.offline.livekit import ScriptedLLM, settle
        from otel_handoff.livekit import LiveKitHandoffInstrumentor
    except ImportError:
        return []

    class Desk(Agent):
        def __init__(self) -> None:
            super().__init__(instructions="Help.")

    async def run() -> None:
        session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Desk())
        for _ in range(4):
            session.update_agent(Desk())
            await settle(session)  # the handoff and the new agent's on_enter
        await session.aclose()

    return [Scenario("livekit", "4 update_agent handoffs", run, LiveKitHandoffInstrumentor, 4)]


def measure(scenario: Scenario) -> dict[str, Any]:
    without = _by_file(scenario, NoOpMeterProvider())
    with_sdk = _by_file(scenario, MeterProvider(metric_readers=[InMemoryMetricReader()]))
    ours = sum(n for path, n in with_sdk.items() if path.endswith(OURS))
    # the SDK's own files only: a framework's run moves by thousands of opcodes from one run to the
    # next (AG2's hub timers), more than six records cost, and would blur the difference
    record = sum(with_sdk[path] - without[path] for path in with_sdk if _SDK in path)
    return {
        "framework": scenario.framework,
        "scenario": scenario.what,
        "handoffs": scenario.handoffs,
        "ours": ours / scenario.handoffs,
        "record": record / scenario.handoffs,
        "share": ours / record if record else 0.0,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| framework | scenario | ours per handoff | the SDK's record calls per handoff | share | goal |",
        "|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        mark = "✅" if r["share"] <= GOAL else "❌"
        lines.append(
            f"| {r['framework']} | {r['scenario']} | {r['ours']:,.0f} | {r['record']:,.0f} "
            f"| {r['share']:.1%} | ≤ {GOAL:.0%} {mark} |"
        )
    lines.append("")
    lines.append(
        "Opcodes, one run after a warm-up, phase metrics on; the SDK's is what an SDK MeterProvider "
        "adds over NoOp meters in opentelemetry's own files (the framework's own work moves from run "
        "to run, by more than a few records cost)."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", help="measure only this framework (keep the others' rows)")
    args = parser.parse_args(argv)
    scenarios = [s for s in [*_livekit(), *_scenarios()] if args.framework in (None, s.framework)]
    rows = [measure(scenario) for scenario in scenarios]
    publish("metrics_share", "Our work around the SDK's metric records", rows, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
