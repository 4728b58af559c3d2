"""End to end: handoff traces through real OTLP receivers, read back intact.

Each test runs what a user runs: ``otel-handoff demo`` (as ``python -m otel_handoff demo``) or
an application calling ``otel_handoff.configure()``, in a subprocess with the standard
``OTEL_EXPORTER_OTLP_*`` variables pointing at rotel (a collector) or Arize Phoenix (a
backend) on loopback. The spans are read back from the receiver (rotel's debug output,
Phoenix's REST API) and compared with what the demo wrote locally (``--export``): same trace
ids, span ids, parent ids (LiveKit's own ``agent_session`` spans included) and attributes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from receivers import (
    ARRIVAL_TIMEOUT,
    DemoRun,
    Phoenix,
    Rotel,
    Span,
    arrived,
    check_handoff_tree,
    check_intact,
    clean_env,
    project_name,
    refused_port,
    run_demo,
    shared_phoenix,
    wait_until,
)

from otel_handoff.core import schema as sc

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
# a handoff that waited for a blocked export would take ~1 s (the exporter's first retry backoff)
# OTEL_EXPORTER_OTLP_TIMEOUT the outage tests set: a handoff that waited on the exporter's
# retries would take at least that long (an offline handoff takes milliseconds)
EXPORT_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo with no exporter: how many handoffs, how long they take."""
    run = run_demo(tmp_path_factory.mktemp("baseline"))
    assert run.handoffs(), "the demo made no handoff"
    return run


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with shared_phoenix(tmp_path_factory) as server:
        yield server


# --- the demo, exported to real receivers ------------------------------------------------------------
def test_demo_to_rotel_over_grpc(rotel: Rotel, tmp_path: Path, baseline: DemoRun) -> None:
    run = run_demo(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=rotel.grpc_endpoint)
    received = arrived(run.exported, rotel.spans)
    check_intact(run.exported, received)
    assert len(run.handoffs()) == len(baseline.handoffs())


def test_demo_to_rotel_over_http_protobuf(rotel: Rotel, tmp_path: Path) -> None:
    run = run_demo(
        tmp_path,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=rotel.http_endpoint,
        OTEL_SERVICE_NAME="handoff-e2e-http",
    )
    received = arrived(run.exported, rotel.spans)
    check_intact(run.exported, received)
    assert {s["resource"].get("service.name") for s in received} == {"handoff-e2e-http"}


def test_demo_to_phoenix_over_http_protobuf(phoenix: Phoenix, tmp_path: Path) -> None:
    project = project_name()
    run = run_demo(
        tmp_path,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix.url}/v1/traces",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
    )
    check_intact(run.exported, arrived(run.exported, lambda: phoenix.spans(project)))


def test_demo_to_phoenix_over_grpc(phoenix: Phoenix, tmp_path: Path) -> None:
    project = project_name()
    run = run_demo(
        tmp_path,
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.grpc_endpoint,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
    )
    check_intact(run.exported, arrived(run.exported, lambda: phoenix.spans(project)))


def test_demo_through_rotel_to_phoenix(phoenix: Phoenix, tmp_path: Path) -> None:
    """The collector hop: demo -> rotel (gRPC in, OTLP exporter out, as rotel.md says) -> Phoenix."""
    project = project_name()
    forwarder = Rotel.start(tmp_path / "rotel", forward_to=phoenix.grpc_endpoint)
    try:
        run = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=forwarder.grpc_endpoint,
            OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        )
        check_intact(run.exported, arrived(run.exported, lambda: phoenix.spans(project)))
        check_intact(run.exported, arrived(run.exported, forwarder.spans))
    finally:
        forwarder.stop()


def test_demo_with_unreachable_endpoint_completes_every_handoff(tmp_path: Path, baseline: DemoRun) -> None:
    with refused_port() as port:  # nothing listens there, nor can anything start to
        run = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_BSP_SCHEDULE_DELAY="1",  # export while the handoffs run, not only at exit
            OTEL_EXPORTER_OTLP_TIMEOUT=str(int(EXPORT_TIMEOUT)),
        )
    handoffs = run.handoffs()
    assert len(handoffs) == len(baseline.handoffs())
    assert all(h["attributes"][sc.OUTCOME] == sc.OUTCOME_COMPLETED for h in handoffs)
    slowest = max(h["attributes"][sc.DURATION] for h in handoffs)
    assert slowest < EXPORT_TIMEOUT, "a handoff waited for the exporter's retries"
    # the user is told: by the outage warning if an export failed before the exit (a quick run can
    # beat it), and always by the exit's line
    lost = [line for line in run.stdout.splitlines() if "spans not delivered to" in line]
    assert len(lost) == 1 and f"127.0.0.1:{port}" in lost[0], run.stdout[-2000:]
    assert len(export_warnings(run.stderr)) <= 1, run.stderr


def export_warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "export" in line.lower()]


def test_demo_with_unreachable_endpoint_warns_once(tmp_path: Path) -> None:
    with refused_port() as port:
        run = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_BSP_SCHEDULE_DELAY="1",
            OTEL_EXPORTER_OTLP_TIMEOUT=str(int(EXPORT_TIMEOUT)),
        )
    # at most one: the outage warning comes only if an export fails before the demo's exit, which
    # a quick run can beat (then the exit's line below says it all)
    assert len(export_warnings(run.stderr)) <= 1, run.stderr
    # nothing arrived, and the demo says so (not "exported ... 0 spans"), with what to check
    assert (
        "spans exported to http" not in run.stdout
        and "otlp/grpc" not in run.stdout.split("spans not delivered")[0]
    )
    [lost] = [line for line in run.stdout.splitlines() if "spans not delivered to" in line]
    assert lost.endswith("check OTEL_EXPORTER_OTLP_ENDPOINT, or run `otel-handoff doctor`"), lost


def test_over_http_the_lost_line_names_the_cause_in_a_few_words(tmp_path: Path) -> None:
    """The OTLP/HTTP exporter fails with urllib3's connection-pool text (300 characters, most of it
    the pool's and the connection object's repr): the line keeps the cause."""
    with refused_port() as port:
        run = run_demo(
            tmp_path,
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_EXPORTER_OTLP_TIMEOUT=str(int(EXPORT_TIMEOUT)),
        )
    [lost] = [line for line in run.stdout.splitlines() if "spans not delivered to" in line]
    assert "Connection refused" in lost and "ConnectionPool" not in lost and " object at 0x" not in lost, lost
    why = lost.split(" (", 1)[1].rsplit("); ", 1)[0]  # was 300 characters, cut there
    assert len(why) < 120, why


# --- an application calling otel_handoff.configure() ---------------------------------------------
APP = """
    import asyncio, json, logging, sys
    sys.path.insert(0, {tests!r})
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import otel_handoff

    configuration = otel_handoff.configure(service_name="configure-app")

    from livekit.agents import AgentSession
    from lk_agents import Billing, Support
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_handoff.cli.offline.livekit import ScriptedLLM

    memory = InMemorySpanExporter()
    configuration.tracer_provider.add_span_processor(SimpleSpanProcessor(memory))


    async def conversation(count):
        session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Billing())
        try:
            for n in range(count):
                agent = Support() if n % 2 == 0 else Billing()
                session.update_agent(agent)
                await asyncio.wait_for(agent.entered.wait(), 10)
        finally:
            await session.aclose()
        handoffs = [s for s in memory.get_finished_spans() if s.name == "agent_handoff"]
        memory.clear()
        return {{
            "handoffs": len(handoffs),
            "completed": sum(s.attributes["agent_handoff.outcome"] == "completed" for s in handoffs),
            "slowest": max(s.attributes["agent_handoff.duration"] for s in handoffs),
        }}


    async def main():
        for n in (1, 2):
            # a task each: LiveKit leaves its session span attached to the context it ran in
            print(json.dumps({{"round": n, **await asyncio.create_task(conversation(3))}}), flush=True)
            if n == 1 and "--pause" in sys.argv:
                await asyncio.to_thread(sys.stdin.readline)


    asyncio.run(main())
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    path = tmp_path / "app.py"
    path.write_text(textwrap.dedent(APP.format(tests=str(TESTS))), encoding="utf-8")
    return path


def rounds(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def telemetry_warnings(stderr: str) -> list[str]:
    """Log lines (WARNING and up) from otel-handoff or the OpenTelemetry SDK and exporters."""
    levels = ("WARNING ", "ERROR ", "CRITICAL ")
    return [
        line
        for line in stderr.splitlines()
        if line.startswith(levels) and line.split(" ", 2)[1].startswith(("otel_handoff", "opentelemetry"))
    ]


def test_configured_app_to_rotel(rotel: Rotel, app: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(app)],
        env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=rotel.grpc_endpoint, OTEL_SERVICE_NAME="handoff-e2e"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    done = rounds(result.stdout)
    assert [r["completed"] for r in done] == [3, 3]

    def all_handoffs() -> list[Span] | None:
        spans = rotel.spans()
        return spans if sum(s["name"] == sc.SPAN_HANDOFF for s in spans) >= 6 else None

    spans = wait_until(all_handoffs, "6 handoffs at rotel", timeout=ARRIVAL_TIMEOUT, every=0.1)
    handoffs = check_handoff_tree(spans)
    assert len(handoffs) == 6 and len({h["trace_id"] for h in handoffs}) == 2, "one trace per session"
    assert {s["resource"]["service.name"] for s in spans} == {"handoff-e2e"}
    assert not telemetry_warnings(result.stderr), result.stderr


def test_receiver_stopped_mid_run(rotel: Rotel, app: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(app), "--pause"],
        env=clean_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=rotel.grpc_endpoint,
            OTEL_BSP_SCHEDULE_DELAY="50",
            OTEL_EXPORTER_OTLP_TIMEOUT=str(int(EXPORT_TIMEOUT)),
        ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert process.stdout is not None and process.stdin is not None
        first = json.loads(process.stdout.readline())
        assert first["completed"] == 3
        wait_until(
            lambda: sum(s["name"] == sc.SPAN_HANDOFF for s in rotel.spans()) >= 3,
            "the first conversation's handoffs at rotel",
            timeout=ARRIVAL_TIMEOUT,
        )
        rotel.stop()  # the receiver goes away mid-run
        process.stdin.write("\n")
        process.stdin.flush()
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, stderr
    (second,) = rounds(stdout)
    assert second["completed"] == 3, "every handoff completes with the receiver gone"
    assert second["slowest"] < EXPORT_TIMEOUT, "a handoff waited for the exporter's retries"
    # at exit one line saying what the outage cost and why; before it, at most the outage's one
    # warning (when an export to the stopped receiver gave up before the exit): nothing else
    *outage, lost = telemetry_warnings(stderr)
    assert "span(s) were not delivered" in lost and rotel.grpc_endpoint in lost, stderr
    assert "UNAVAILABLE" in lost or "cannot export" in "".join(outage), stderr
    assert len(outage) <= 1 and all("otel-handoff: cannot export" in line for line in outage), stderr
