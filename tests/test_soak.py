"""Soak: 2,000 real handoffs across 50 concurrent offline sessions, exported through rotel.

The collector is stopped and restarted mid-run. Checked: every handoff gives exactly one
complete `agent_handoff` span and none stays open; the agents never notice the collector going
away; what was sent while it was up arrived; and nothing of the sessions, activities or agents
is kept alive by the instrumentation once they are closed, nor does its memory grow with the
number of handoffs. Bounded in count and time, loopback only.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

from livekit.agents import AgentSession
from livekit.agents.telemetry import set_tracer_provider
from lk_agents import Billing, Support
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import NoOpTracerProvider
from receivers import Rotel, wait_until
from support import HANDOFF_ALWAYS, OpenSpans

from otel_handoff.cli.offline.livekit import ScriptedLLM
from otel_handoff.core import schema as sc
from otel_handoff.livekit import LiveKitHandoffInstrumentor

SESSIONS = 50
# handoffs per session in each phase: collector up, collector down, collector restarted
PHASES = {"up": 20, "down": 10, "restarted": 10}
ROUND_LIMIT = 300  # seconds: a bound on a round, not a performance goal
EXPORT_TIMEOUT = 5  # seconds per export, retries included
QUEUE_SIZE = 1 << 16  # spans: more than a round makes
REQUIRED = (*HANDOFF_ALWAYS, sc.DRAIN_DURATION, sc.CLOSE_DURATION, sc.START_DURATION)


class HandoffLedger(SpanProcessor):
    """Keeps (trace id, sequence) of each finished handoff span, and what was wrong with it."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []
        self.problems: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.name != sc.SPAN_HANDOFF:
            return
        attributes = span.attributes or {}
        missing = [key for key in REQUIRED if key not in attributes]
        if missing or attributes.get(sc.OUTCOME) != "completed":
            self.problems.append(f"{missing} {attributes.get(sc.OUTCOME)}")
        self.seen.append((span.context.trace_id, int(attributes.get(sc.SEQUENCE, 0))))


class Tracked:
    """Weak references to every session and agent a round creates."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []

    def __call__(self, obj: Any) -> Any:
        self.refs.append(weakref.ref(obj))
        return obj

    def alive(self) -> list[str]:
        gc.collect()
        return [type(ref()).__name__ for ref in self.refs if ref() is not None]


class Phase:
    """Lets all sessions run one phase, then tells when the last of them has finished it."""

    def __init__(self, handoffs: int) -> None:
        self.handoffs = handoffs
        self.go = asyncio.Event()
        self.finished = asyncio.Event()
        self.done = 0

    def session_done(self) -> None:
        self.done += self.handoffs
        if self.done == SESSIONS * self.handoffs:
            self.finished.set()


async def conversation(tracked: Tracked, phases: dict[str, Phase]) -> None:
    """One session handing off back and forth through every phase."""
    session = tracked(AgentSession(llm=ScriptedLLM()))
    await session.start(agent=tracked(Billing()))
    for phase in phases.values():
        await phase.go.wait()
        for n in range(phase.handoffs):
            session.update_agent(tracked(Support() if n % 2 == 0 else Billing()))
            await session._update_activity_atask
        phase.session_done()
    await session.aclose()


async def soak_round(tracked: Tracked, between: Any = None) -> dict[str, int]:
    """All sessions at once; `between(phase)` runs after each phase, before the next starts."""
    phases = {name: Phase(handoffs) for name, handoffs in PHASES.items()}
    everyone = asyncio.gather(*(conversation(tracked, phases) for _ in range(SESSIONS)))
    for name, phase in phases.items():
        phase.go.set()
        finished = asyncio.ensure_future(phase.finished.wait())
        await asyncio.wait([finished, everyone], return_when=asyncio.FIRST_COMPLETED)
        if not finished.done():
            await everyone  # a session failed: raise its exception
        if between is not None:
            await asyncio.to_thread(between, name)  # a thread: the sessions' loop never blocks
    await everyone
    return {name: phase.done for name, phase in phases.items()}


def handoff_keys(rotel: Rotel) -> set[tuple[int, int]]:
    return {
        (int(s["trace_id"], 16), int(s["attributes"][sc.SEQUENCE]))
        for s in rotel.spans()
        if s["name"] == sc.SPAN_HANDOFF
    }


def ours_in_memory(snapshot: tracemalloc.Snapshot) -> int:
    return sum(
        stat.size for stat in snapshot.statistics("filename") if "otel_handoff" in stat.traceback[0].filename
    )


async def test_soak_through_a_collector_restart(
    tmp_path: Path, open_spans: OpenSpans, provider: TracerProvider
) -> None:
    test_provider = provider  # the suite's, given back to LiveKit afterwards
    rotel = Rotel.start(tmp_path / "rotel-1")
    ports = (rotel.grpc_port, rotel.http_port)
    ledger = HandoffLedger()
    provider = TracerProvider()
    provider.add_span_processor(ledger)
    provider.add_span_processor(open_spans)
    # the export deadline and queue are sized so that a loaded machine, not the collector, never drops
    # a span sent while the collector is up; while it is down, each batch gives up after about 3 s
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=rotel.grpc_endpoint, insecure=True, timeout=EXPORT_TIMEOUT),
            max_queue_size=QUEUE_SIZE,
        )
    )
    probe = provider.get_tracer("soak-probe")
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    set_tracer_provider(NoOpTracerProvider())  # LiveKit's own spans are not what this soaks
    arrived: dict[str, set[tuple[int, int]]] = {}
    restarted: list[Rotel] = []
    sent_before_restart: list[int] = []
    probes: list[str] = []

    def received_by(collector: Rotel, since: int) -> set[tuple[int, int]]:
        """What `collector` printed, once it has printed every handoff ended since `since`.

        rotel acknowledges an export before it writes its debug log: wait (bounded) for the log.
        """
        sent = set(ledger.seen[since:])
        return wait_until(lambda: (keys := handoff_keys(collector)) >= sent and keys, "rotel's log")

    def reconnected(collector: Rotel) -> bool:
        """Send a probe span and tell whether the collector printed it: the exporter is through."""
        name = f"soak-probe-{len(probes)}"
        probes.append(name)
        probe.start_span(name, context=Context()).end()
        provider.force_flush(30_000)
        return any(span["name"] in probes for span in collector.spans())

    def between(phase: str) -> None:
        nonlocal rotel
        if phase == "down":
            rotel = Rotel.start(tmp_path / "rotel-2", restart=rotel)
            restarted.append(rotel)
            # the exporter's channel reconnects in its own time: the next phase starts once it has
            wait_until(lambda: reconnected(rotel), "the exporter to reach the restarted collector", every=0.5)
            sent_before_restart.append(len(ledger.seen))
            return
        assert provider.force_flush(30_000)
        if phase == "up":
            arrived["up"] = received_by(rotel, 0)
            rotel.stop(keep_ports=True)
        else:
            arrived["restarted"] = received_by(rotel, sent_before_restart[0])

    try:
        tracemalloc.start()
        started = time.monotonic()
        first = Tracked()
        done = await asyncio.wait_for(soak_round(first, between), ROUND_LIMIT)
        first_round = time.monotonic() - started
        assert first.alive() == [], "sessions or agents kept alive after close"
        baseline = ours_in_memory(tracemalloc.take_snapshot())

        second = Tracked()
        await asyncio.wait_for(soak_round(second), ROUND_LIMIT)
        assert second.alive() == []
        growth = ours_in_memory(tracemalloc.take_snapshot()) - baseline
    finally:
        tracemalloc.stop()
        instrumentor.uninstrument()
        set_tracer_provider(test_provider)
        provider.shutdown()
        rotel.stop()

    per_session = sum(PHASES.values())
    total = SESSIONS * per_session
    print(
        f"soak: {2 * total} handoffs, {SESSIONS} concurrent sessions, first round {first_round:.1f} s, "
        f"otel_handoff memory growth over the second round {growth} bytes"
    )
    # the agents never noticed: every handoff of every phase completed
    assert done == {phase: SESSIONS * n for phase, n in PHASES.items()}
    # exactly one complete span per handoff (sequences 1..40 once per session and round), none open
    assert ledger.problems == []
    assert len(ledger.seen) == 2 * total and len(set(ledger.seen)) == 2 * total
    assert Counter(seq for _, seq in ledger.seen) == {seq: 2 * SESSIONS for seq in range(1, per_session + 1)}
    assert not open_spans.ours()
    # sent while the collector was up: arrived (the first phase before the stop, the last after the
    # restart); the first round's spans are those it finished before the second round began
    first_round_spans = ledger.seen[:total]
    up = {key for key in first_round_spans if key[1] <= PHASES["up"]}
    last = {key for key in first_round_spans if key[1] > per_session - PHASES["restarted"]}
    assert len(up) == SESSIONS * PHASES["up"] and up <= arrived["up"]
    assert len(last) == SESSIONS * PHASES["restarted"] and last <= arrived["restarted"]
    assert restarted and restarted[0].grpc_port == ports[0]
    # the instrumentation's own memory does not grow with the number of handoffs
    assert growth < 64 * 1024, f"otel_handoff holds {growth} more bytes after {total} more handoffs"


def test_ledger_catches_incomplete_spans() -> None:
    ledger = HandoffLedger()
    provider = TracerProvider()
    provider.add_span_processor(ledger)
    provider.get_tracer("t").start_span(sc.SPAN_HANDOFF, context=Context(), attributes={sc.SEQUENCE: 1}).end()
    assert ledger.problems and ledger.seen == [(ledger.seen[0][0], 1)]
