"""``otel-handoff summary`` on spans really exported: the demo's OTLP JSON Lines, the SDK's console
exporter, an AG2 chat, Jaeger's query API (documented shape, served locally) and Phoenix."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import environments
import pytest
from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from otel_handoff.cli import main
from otel_handoff.cli.span_sources import SpanSourceError, parse_spans, read_spans
from otel_handoff.cli.summary import PHASE_NAMES, collect_handoffs, csv_header, percentile, summarize
from otel_handoff.core import schema as sc
from otel_handoff.core.frameworks import FRAMEWORKS
from otel_handoff.export import otlp_json

pytest.importorskip("livekit.agents", reason="the demo needs livekit-agents")

DEMO_PAIRS = {
    ("triage", "collect_email"): "task",
    ("collect_email", "triage"): "task",
    ("triage", "billing"): "tool",
    ("concierge", "specialist"): "api",
    ("specialist", "supervisor"): "api",
    ("supervisor", "concierge"): "api",
}
# what the offline AG2 support chat hands off, in order (see otel_handoff.cli.offline.ag2_classic)
AG2_PAIRS = {
    ("triage", "billing"): "llm_condition",
    ("billing", "triage"): "reply_result",
    ("triage", "closer"): "context_condition",
    ("closer", "triage"): "after_work",
    ("triage", "auditor"): "tool",
    ("auditor", "billing"): "guardrail",
    ("billing", "(none)"): "group_after_work",
}

# one subprocess: the demo's spans through the SDK's ConsoleSpanExporter, and an AG2 chat as OTLP JSON
_EXPORTS = textwrap.dedent(
    """
    import asyncio, contextlib, io, sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otel_handoff.cli.demo import run_demo, write_otlp_json

    result = asyncio.run(run_demo())
    result.shutdown()
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        ConsoleSpanExporter(out=out).export(result.spans)

    from autogen.agentchat import initiate_group_chat
    from otel_handoff.cli.offline.ag2_classic import SUPPORT_CHAT_MESSAGE, build_support_chat
    from otel_handoff.ag2 import AG2HandoffInstrumentor

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    AG2HandoffInstrumentor().instrument(tracer_provider=provider)
    with contextlib.redirect_stdout(io.StringIO()):
        initiate_group_chat(pattern=build_support_chat(), messages=SUPPORT_CHAT_MESSAGE, max_rounds=30)
    write_otlp_json(memory.get_finished_spans(), sys.argv[2])
    """
)


# --- real exports, once per module -------------------------------------------------------------
def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, "-m", "otel_handoff", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("summary")


@pytest.fixture(scope="module")
def demo_file(workdir: Path) -> Path:
    """``otel-handoff demo --export handoffs.json``, as a new user runs it."""
    run = _cli("demo", "--export", "handoffs.json", cwd=workdir)
    assert run.returncode == 0, run.stderr
    return workdir / "handoffs.json"


@pytest.fixture(scope="module")
def other_exports(workdir: Path) -> tuple[Path, Path]:
    """(ConsoleSpanExporter output of the demo, OTLP JSON Lines of the offline AG2 chat)."""
    pytest.importorskip("autogen.agentchat.group", reason="the AG2 export needs the classic autogen package")
    console, ag2 = workdir / "console.txt", workdir / "ag2.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run(
        [sys.executable, "-c", _EXPORTS, str(console), str(ag2)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return console, ag2


def raw_spans(path: Path) -> list[dict[str, Any]]:
    """The spans of an OTLP JSON Lines file as JSON objects (the fixtures below reshape them into
    Phoenix and Jaeger documents), attribute values decoded by json_format."""
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for _, span in otlp_json.span_paths(json.loads(line)):
            attributes = {
                a["key"]: otlp_json.any_value(json_format.ParseDict(a["value"], AnyValue()))
                for a in span.get("attributes", [])
            }
            spans.append({**span, "attributes": attributes})
    return spans


def raw_pairs(path: Path) -> Counter[tuple[str, str]]:
    return Counter(
        (
            s["attributes"][sc.FROM_AGENT_NAME],
            s["attributes"].get(sc.TO_AGENT_NAME, "(none)"),
        )
        for s in raw_spans(path)
        if s["name"] == sc.SPAN_HANDOFF
    )


def summary_json(capsys: pytest.CaptureFixture[str], source: str | Path) -> dict[str, Any]:
    assert main(["summary", str(source), "--format", "json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def by_pair(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(p["from_agent"], p["to_agent"]): p for p in document["pairs"]}


def assert_sane(pair: dict[str, Any]) -> None:
    for stats in [pair["duration"], *pair["phases"].values()]:
        assert 0 <= stats["p50"] <= stats["p95"] <= stats["max"]
        assert stats["count"] >= 1


# --- the new user's flow ------------------------------------------------------------------------
def test_demo_export_then_summary_prints_a_table(demo_file: Path) -> None:
    run = _cli("summary", "handoffs.json", cwd=demo_file.parent)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    out = run.stdout
    assert out.startswith("6 handoffs, 6 agent pairs in handoffs.json")
    header = next(line for line in out.splitlines() if line.startswith("framework"))
    columns = "framework from → to via n p50 p95 max err stt realtime turn"  # no rejection nor skip here
    assert header.split() == columns.split(" ")
    for (source, target), via in DEMO_PAIRS.items():
        row = next(line for line in out.splitlines() if f"{source} → {target} " in line)
        assert row.split()[:6] == ["livekit-agents", source, "→", target, via, "1"]
    assert "first_speech" in out  # the linked span of the tool transfer's greeting
    assert "mean phase time per pair in ms" in out
    assert "█" in out or "▏" in out


# --- numbers ------------------------------------------------------------------------------------
def test_counts_and_numbers_match_the_exported_spans(
    demo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = raw_spans(demo_file)
    handoffs = {
        (s["attributes"][sc.FROM_AGENT_NAME], s["attributes"][sc.TO_AGENT_NAME]): s
        for s in spans
        if s["name"] == sc.SPAN_HANDOFF
    }
    document = summary_json(capsys, demo_file)
    pairs = by_pair(document)
    assert document["handoffs"] == sum(raw_pairs(demo_file).values()) == 6
    assert {key: p["count"] for key, p in pairs.items()} == dict(raw_pairs(demo_file))
    assert document["percentiles"] == "nearest-rank"
    for key, pair in pairs.items():
        span = handoffs[key]
        assert pair["framework"] == sc.FRAMEWORK_LIVEKIT
        assert pair["via"] == {DEMO_PAIRS[key]: 1}
        assert pair["outcomes"][sc.OUTCOME_COMPLETED] == 1
        assert pair["duration"]["p50"] == pair["duration"]["max"] == span["attributes"][sc.DURATION]
        for phase in ("drain", "pause", "close", "start", "resume", "queue_wait", "lock_wait"):
            value = span["attributes"].get(f"agent_handoff.{phase}.duration")
            if phase.endswith("_wait") and value == 0:
                value = None  # as in the phase metric, only handoffs that waited count
            assert pair["phases"].get(phase, {}).get("p95") == value, (key, phase)
        children = [
            c for c in spans if c.get("parentSpanId") == span["spanId"] and c["name"] == sc.SPAN_ON_ENTER
        ]
        if children:
            assert pair["phases"]["on_enter"]["p50"] == children[0]["attributes"][sc.ON_ENTER_DURATION]
        elif sc.ON_ENTER_DURATION in span["attributes"]:  # LiveKit's on_enter span stood for ours (1.8.2+)
            assert pair["phases"]["on_enter"]["p50"] == span["attributes"][sc.ON_ENTER_DURATION]
        else:  # an AgentTask handing back resumes its parent: no on_enter
            assert "on_enter" not in pair["phases"] and key == ("collect_email", "triage")
        for flag, attribute in (
            ("stt", sc.STT_REUSED),
            ("realtime_session", sc.REALTIME_SESSION_REUSED),
            ("turn_detector", sc.TURN_DETECTOR_REUSED),
        ):
            assert pair["reuse"][flag]["reused"] == int(span["attributes"][attribute])
        assert_sane(pair)

    speech = next(s for s in spans if s["name"] == sc.SPAN_FIRST_SPEECH)
    linked = next(key for key, s in handoffs.items() if s["spanId"] == speech["links"][0]["spanId"])
    assert linked == ("triage", "billing")
    assert pairs[linked]["phases"]["first_speech"]["max"] == speech["attributes"][sc.FIRST_SPEECH_DELAY]
    assert pairs[("supervisor", "concierge")]["phases"]["queue_wait"]["max"] > 0  # queued behind supervisor
    assert pairs[("concierge", "specialist")]["reuse"]["realtime_session"]["rate"] == 1.0
    assert pairs[("specialist", "supervisor")]["reuse"]["realtime_session"]["rate"] == 0.0


def test_many_calls_aggregate_per_pair(
    demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three calls' worth of spans: counts add up and the percentiles span them."""
    lines = demo_file.read_text(encoding="utf-8").splitlines()
    calls = []
    for call in range(3):  # the same conversations in other traces, as three calls would be
        calls += [re.sub(r'"traceId":"[0-9a-f]{2}', f'"traceId":"{call:02x}', line) for line in lines]
    three = _write(tmp_path / "three.jsonl", calls)
    pairs = by_pair(summary_json(capsys, three))
    assert {key: p["count"] for key, p in pairs.items()} == dict.fromkeys(DEMO_PAIRS, 3)
    for pair in pairs.values():
        assert pair["duration"]["count"] == 3
        assert_sane(pair)
    assert pairs[("triage", "billing")]["phases"]["first_speech"]["count"] == 3  # links follow the trace


def test_a_span_seen_twice_counts_once(
    demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Repeats (overlapping queries, an exporter's retry) count once, and one line says how many."""
    spans = len(raw_spans(demo_file))
    many = tmp_path / "many.jsonl"
    many.write_text(demo_file.read_text(encoding="utf-8") * 5, encoding="utf-8")
    code, out, err = _run(capsys, many, "--format", "table")
    assert code == 0
    assert err.splitlines() == [
        f"otel-handoff summary: {many}: {4 * spans} repeated span(s) (same trace and span id) counted once"
    ]
    rows = [line.split() for line in out.splitlines() if line.startswith("livekit-agents")]
    assert {(r[1], r[3]): r[4:6] for r in rows} == {k: [via, "1"] for k, via in DEMO_PAIRS.items()}  # no "x5"
    assert summary_json(capsys, many)["handoffs"] == 6


def test_via_counts_only_when_there_are_several_ways() -> None:
    from otel_handoff.cli.summary import HandoffRecord as Handoff
    from otel_handoff.cli.summary import _via

    def handoff(via: str) -> Handoff:
        return Handoff("livekit-agents", "a", "b", via, "completed", 0.01)

    (one,) = summarize([handoff("task")] * 3)
    (mixed,) = summarize([handoff("task"), handoff("task"), handoff("tool")])
    assert (_via(one), _via(mixed)) == ("task", "task x2, tool")


def test_a_cut_off_last_line_is_left_out_with_one_warning(
    demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As a collector's file exporter leaves a file it is still writing: the complete lines count."""
    requests = demo_file.read_text(encoding="utf-8").splitlines()
    cut = _write(tmp_path / "cut.jsonl", [*requests, requests[0][: len(requests[0]) // 2]])
    code, out, err = _run(capsys, cut, "--format", "json")
    assert code == 0
    line = len(requests) + 1
    assert err.splitlines() == [
        f"otel-handoff summary: {cut}: line {line} is cut off (a file still being written?): left out"
    ]
    assert json.loads(out)["handoffs"] == 6
    # a last line broken other than at its end was cut into, not cut off: said as such
    broken = _write(tmp_path / "broken.jsonl", [*requests, requests[0].replace(":", ";", 1)])
    code, out, err = _run(capsys, broken, "--format", "json")
    assert (code, json.loads(out)["handoffs"]) == (0, 6)
    assert (
        "1 span document(s) that do not parse left out (another writer's output cut into them?), "
        f"the first at line {line}: invalid JSON: " in err
    ), err


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(10, 0, -1)]
    assert percentile(values, 50) == 5.0
    assert percentile(values, 95) == 10.0
    assert percentile(values, 90) == 9.0
    assert percentile([1.0, 2.0], 50) == 1.0
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_csv_has_one_row_per_pair(demo_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(demo_file), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == csv_header(summarize(collect_handoffs(read_spans(str(demo_file)))))
    assert {(r["from_agent"], r["to_agent"]): int(r["count"]) for r in rows} == dict(raw_pairs(demo_file))
    for row in rows:
        assert float(row["duration_p50_s"]) <= float(row["duration_p95_s"]) <= float(row["duration_max_s"])
        assert row["first_speech_p50_s"] == "" or float(row["first_speech_p50_s"]) > 0
    # the phases the file holds (LiveKit's), not every framework's: 5 columns each
    pairs = summary_json(capsys, demo_file)["pairs"]
    phases = {c.removesuffix("_p95_s") for c in rows[0] if c.endswith("_p95_s")} - {"duration", "heard_delay"}
    assert phases == {phase for pair in pairs for phase in pair["phases"]}
    assert len(rows[0]) < 5 * len(PHASE_NAMES) / 2


def test_chart_only(demo_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", str(demo_file), "--chart"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("mean phase time per pair in ms")
    assert "framework" not in out  # no table
    assert out.count("│") >= 2 * 6 * 4  # bars for at least four phases of each pair


def test_chart_with_a_machine_format_is_a_usage_error(demo_file: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", str(demo_file), "--chart", "--format", "json"])
    assert exit_info.value.code == 2


# --- other exporters ------------------------------------------------------------------------------
def test_console_exporter_output(
    other_exports: tuple[Path, Path], demo_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    console, _ = other_exports
    assert console.read_text(encoding="utf-8").startswith("{\n")  # pretty-printed objects, back to back
    pairs = by_pair(summary_json(capsys, console))
    from_otlp = by_pair(summary_json(capsys, demo_file))  # another run of the same conversations
    assert {key: p["count"] for key, p in pairs.items()} == dict.fromkeys(DEMO_PAIRS, 1)
    for key, pair in pairs.items():
        assert pair["via"] == {DEMO_PAIRS[key]: 1}
        assert pair["phases"].keys() == from_otlp[key]["phases"].keys()
        assert pair["reuse"] == from_otlp[key]["reuse"]
        assert_sane(pair)
    assert "first_speech" in pairs[("triage", "billing")]["phases"]  # links survive the console format


def test_console_output_mixed_with_the_apps_prints(
    other_exports: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The app prints to the same stdout as ConsoleSpanExporter: text, a line opening with ``[``, JSON
    of its own, and text on the line a span starts (a print's line end after the exporter's write):
    each line skipped and counted, every span read."""
    console, _ = other_exports
    documents = console.read_text(encoding="utf-8").split("\n}\n")
    mixed = tmp_path / "stdout.txt"
    between = '\n}\n[12:00:01] user said hello\n{"level": "info", "msg": "turn"}\nevents:'
    mixed.write_text("agent starting on port 8080\n" + between.join(documents), encoding="utf-8")
    alone = summary_json(capsys, console)
    assert main(["summary", str(mixed), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["pairs"] == alone["pairs"]
    skipped = 1 + 3 * (len(documents) - 1)  # the first line, three between each two documents
    assert err.splitlines() == [
        f"otel-handoff summary: {mixed}: {skipped} line(s) outside the span documents skipped "
        "(the app's own output?), the first at line 1"
    ]
    (tmp_path / "prints.txt").write_text("hello\nworld\n", encoding="utf-8")
    assert main(["summary", str(tmp_path / "prints.txt")]) == 2
    assert "line 1: not JSON, and no span document anywhere in the text" in capsys.readouterr().err


# an app whose thread prints while the console exporter writes spans on another: one stdout
_PRINTING_APP = textwrap.dedent(
    """
    import asyncio, sys, threading
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from otel_handoff.cli.demo_export import DemoTracing
    from otel_handoff.cli import demo

    original = DemoTracing.create

    def create(export_path):
        tracing = original(export_path)
        tracing.provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        return tracing

    DemoTracing.create = staticmethod(create)
    stop = threading.Event()

    def chatter():
        n = 0
        while not stop.is_set():
            n += 1
            print(f"[app] tick {n}", "{", end="")  # no line end: the next write shares its line
            print("events:", flush=n % 7 == 0)

    thread = threading.Thread(target=chatter)
    thread.start()
    result = asyncio.run(demo.run_demo(export_path=sys.argv[1]))
    stop.set()
    thread.join()
    result.shutdown()
    """
)


def test_console_spans_beside_a_printing_thread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Real interleaving in one process: every span of the run reaches ``summary`` from stdout."""
    export = tmp_path / "spans.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run(
        [sys.executable, "-c", _PRINTING_APP, str(export)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    stdout = tmp_path / "stdout.txt"
    stdout.write_text(run.stdout, encoding="utf-8")
    from_stdout = {(s.span_id, s.name) for s in read_spans(str(stdout))}
    assert from_stdout == {(s.span_id, s.name) for s in read_spans(str(export))}
    assert main(["summary", str(stdout), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["handoffs"] == 6
    assert "do not parse" not in err and "line(s) outside the span documents skipped" in err


def test_ag2_chat_export(other_exports: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, ag2 = other_exports
    assert raw_pairs(ag2) == Counter(AG2_PAIRS.keys())
    pairs = by_pair(summary_json(capsys, ag2))
    assert {key: p["count"] for key, p in pairs.items()} == dict.fromkeys(AG2_PAIRS, 1)
    for key, pair in pairs.items():
        assert pair["framework"] == sc.FRAMEWORK_AG2
        assert pair["via"] == {AG2_PAIRS[key]: 1}  # agent_handoff.kind stands in for the trigger
        assert pair["phases"] == {} and pair["reuse"] == {}
        assert pair["duration"]["p50"] > 0
    assert main(["summary", str(ag2)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("ag2") and "billing → (none)" in line)
    assert row.split()[:6] == ["ag2", "billing", "→", "(none)", "group_after_work", "1"]
    assert "(no phases recorded" in out


def test_livekit_and_ag2_in_one_file_stay_apart(
    demo_file: Path, other_exports: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(demo_file.read_text(encoding="utf-8") + other_exports[1].read_text(encoding="utf-8"))
    document = summary_json(capsys, mixed)
    frameworks = Counter(p["framework"] for p in document["pairs"])
    assert frameworks == {sc.FRAMEWORK_LIVEKIT: 6, sc.FRAMEWORK_AG2: 7}  # triage → billing in both, apart
    assert document["handoffs"] == 13


# --- no handoffs, malformed input -----------------------------------------------------------------
def _run(capsys: pytest.CaptureFixture[str], path: Path, *options: str) -> tuple[int, str, str]:
    code = main(["summary", str(path), *options])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_empty_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("")
    code, out, err = _run(capsys, empty)
    assert (code, out) == (1, "")
    assert err == f"otel-handoff summary: {empty}: no handoff spans (no spans)\n"


def test_spans_but_no_handoffs(demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    requests = [json.loads(line) for line in demo_file.read_text().splitlines()]
    for request in requests:
        for resource_spans in request["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                scope_spans["spans"] = [
                    s for s in scope_spans["spans"] if not s["name"].startswith("agent_handoff")
                ]
    other = tmp_path / "livekit-only.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in requests))
    code, _, err = _run(capsys, other)
    assert code == 1
    assert err.rstrip("\n").endswith("spans, none named agent_handoff)") and err.count("\n") == 1


def _lines(demo_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in demo_file.read_text().splitlines()]


def _write(path: Path, requests: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests))
    return path


def _first_handoff(request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(field path, span) of the request's first agent_handoff span."""
    for n, scope_spans in enumerate(request["resourceSpans"][0]["scopeSpans"]):
        for i, span in enumerate(scope_spans["spans"]):
            if span["name"] == sc.SPAN_HANDOFF:
                return f"resourceSpans[0].scopeSpans[{n}].spans[{i}]", span
    raise AssertionError("no agent_handoff span")


def test_bad_json_names_its_line(demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A span document that does not parse is left out and named; alone, it is an error."""
    requests = _lines(demo_file)
    bad = _write(tmp_path / "bad.jsonl", [requests[0], '{"resourceSpans": [', *requests[1:]])
    code, out, err = _run(capsys, bad, "--format", "json")
    assert code == 0 and "Traceback" not in err
    assert json.loads(out)["handoffs"] == 6  # every other line's
    assert err.splitlines() == [
        f"otel-handoff summary: {bad}: 1 span document(s) that do not parse left out "
        "(another writer's output cut into them?), the first at line 2: invalid JSON: "
        "Expecting ',' delimiter (line 4, column 1)"
    ], err
    alone = _write(tmp_path / "alone.jsonl", ['{"resourceSpans": [}'])
    code, out, err = _run(capsys, alone)
    assert (code, out) == (2, "")
    assert err == f"otel-handoff summary: {alone}: line 1: invalid JSON: Expecting value (column 20)\n"


def test_span_without_a_name(demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    requests = _lines(demo_file)
    path, span = _first_handoff(requests[1])
    del span["name"]
    code, _, err = _run(capsys, _write(tmp_path / "nameless.jsonl", requests))
    assert code == 2
    assert err.endswith(f": line 2: {path}.name: missing\n")


def test_attributes_of_the_wrong_type(
    demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = _lines(demo_file)
    path, span = _first_handoff(requests[0])
    span["attributes"] = {a["key"]: a["value"] for a in span["attributes"]}  # an object, not a list
    code, _, err = _run(capsys, _write(tmp_path / "attributes.jsonl", requests))
    assert code == 2
    # json_format's words, at the field's path, without quoting the values
    assert err.endswith(f": line 1: {path}.attributes: repeated field attributes must be in []\n")


def test_a_duration_that_is_not_a_number(
    demo_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    requests = _lines(demo_file)
    _, span = _first_handoff(requests[0])
    for attribute in span["attributes"]:
        if attribute["key"] == sc.DURATION:
            attribute["value"] = {"stringValue": "fast"}
    code, _, err = _run(capsys, _write(tmp_path / "duration.jsonl", requests))
    assert code == 2
    assert err.endswith("(agent_handoff): agent_handoff.duration: expected a number of seconds, got 'fast'\n")
    # a span whose id is missing is named as such, not with a gap
    del span["spanId"]
    code, _, err = _run(capsys, _write(tmp_path / "no-id.jsonl", requests))
    assert code == 2 and "  " not in err
    assert "span (no span id) (agent_handoff): agent_handoff.duration" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "line 1: [0]: expected an object, got a number"),
        ('{"hello": 1}', "line 1: document: not trace data"),
        (
            '{\n  "name": "x",\n  "context": {\n    "span_id": "0x01"\n  }\n}\n',
            "line 1: context.trace_id: missing",
        ),
        ('{\n  "resourceSpans": [\n', "line 3: invalid JSON"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "spans[0].traceId: expected a",
        ),
        ('{"data": null, "errors": [{"code": 400, "msg": "bad service"}]}', "data: no data: bad service"),
    ],
)
def test_malformed_documents(text: str, message: str) -> None:
    with pytest.raises(SpanSourceError) as error:
        parse_spans(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, tmp_path / "nowhere.json")
    assert code == 2 and err.endswith("nowhere.json: no such file\n")


def test_collector_file_with_metrics_lines(demo_file: Path, tmp_path: Path) -> None:
    """The Collector's file exporter may write metrics to the same file: those lines are skipped."""
    mixed = tmp_path / "collector.jsonl"
    mixed.write_text('{"resourceMetrics": []}\n' + demo_file.read_text())
    assert len(collect_handoffs(read_spans(str(mixed)))) == 6


# --- Jaeger's query API: its documented JSON shape, served on loopback ----------------------------
# Jaeger does not install here: the fixture follows the documented /api/traces response
# (traceID, spanID, operationName, references, startTime and duration in µs, tags, processID).
def to_jaeger(spans: list[dict[str, Any]]) -> dict[str, Any]:
    def tag(key: str, value: Any) -> dict[str, Any]:
        if isinstance(value, bool):
            return {"key": key, "type": "bool", "value": value}
        if isinstance(value, float):
            return {"key": key, "type": "float64", "value": value}
        if isinstance(value, (dict, list)):
            return {"key": key, "type": "string", "value": json.dumps(value)}
        if isinstance(value, str) and value.isdigit():
            return {"key": key, "type": "int64", "value": int(value)}
        return {"key": key, "type": "string", "value": value}

    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        start = int(span["startTimeUnixNano"]) // 1000
        references = []
        if span.get("parentSpanId"):
            references.append(
                {"refType": "CHILD_OF", "traceID": span["traceId"], "spanID": span["parentSpanId"]}
            )
        references += [
            {"refType": "FOLLOWS_FROM", "traceID": link["traceId"], "spanID": link["spanId"]}
            for link in span.get("links", [])
        ]
        tags = [tag(k, v) for k, v in span["attributes"].items()]
        tags.append({"key": "span.kind", "type": "string", "value": "internal"})
        if span.get("status", {}).get("code") == 2:
            tags.append({"key": "otel.status_code", "type": "string", "value": "ERROR"})
        traces.setdefault(span["traceId"], []).append(
            {
                "traceID": span["traceId"],
                "spanID": span["spanId"],
                "operationName": span["name"],
                "references": references,
                "startTime": start,
                "duration": int(span["endTimeUnixNano"]) // 1000 - start,
                "tags": tags,
                "logs": [],
                "processID": "p1",
                "warnings": None,
            }
        )
    process = {"serviceName": "otel-handoff-demo", "tags": []}
    data = [
        {"traceID": t, "spans": s, "processes": {"p1": process}, "warnings": None} for t, s in traces.items()
    ]
    return {"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}


class _Server:
    """A loopback http.server answering GETs from a function of (path, query)."""

    def __init__(self, answer: Callable[[str, dict[str, str]], tuple[int, Any]]) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                parts = urllib.parse.urlsplit(self.path)
                status, body = answer(parts.path, dict(urllib.parse.parse_qsl(parts.query)))
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[str, dict[str, str]], tuple[int, Any]]], _Server]]:
    servers: list[_Server] = []

    def start(answer: Callable[[str, dict[str, str]], tuple[int, Any]]) -> _Server:
        servers.append(_Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_jaeger_query_api(demo_file: Path, serve: Any, capsys: pytest.CaptureFixture[str]) -> None:
    response = to_jaeger(raw_spans(demo_file))

    def answer(path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path == "/api/traces" and query.get("service") == "otel-handoff-demo":
            return 200, response
        if path.startswith("/api/traces/"):
            wanted = path.rsplit("/", 1)[1]
            return 200, {**response, "data": [t for t in response["data"] if t["traceID"] == wanted]}
        return 404, {"data": None, "errors": [{"code": 404, "msg": "not found"}]}

    server = serve(answer)
    expected = summary_json(capsys, demo_file)
    from_jaeger = summary_json(capsys, f"{server.url}/api/traces?service=otel-handoff-demo&limit=20")
    assert by_pair(from_jaeger).keys() == by_pair(expected).keys()
    for key, pair in by_pair(from_jaeger).items():
        want = by_pair(expected)[key]
        assert pair["count"] == want["count"] and pair["via"] == want["via"]
        assert pair["reuse"] == want["reuse"]
        assert pair["duration"]["p50"] == want["duration"]["p50"]  # from the tag, not µs arithmetic
        assert pair["phases"].keys() == want["phases"].keys()  # first_speech found through FOLLOWS_FROM
        assert_sane(pair)

    one_trace = response["data"][0]["traceID"]
    single = summary_json(capsys, f"{server.url}/api/traces/{one_trace}")
    assert single["handoffs"] == 3

    assert main(["summary", f"{server.url}/api/traces?service=nobody"]) == 2
    assert "HTTP 404" in capsys.readouterr().err


def test_an_unreachable_url(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["summary", f"http://127.0.0.1:{port}/api/traces?service=x"]) == 2
    assert "cannot connect" in capsys.readouterr().err


# --- Phoenix's REST API ---------------------------------------------------------------------------
def to_phoenix(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans as Phoenix 20's /v1/projects/P/spans returns them: no links, ISO times, flat attributes."""
    from datetime import datetime, timezone

    def iso(nanos: str) -> str:
        return datetime.fromtimestamp(int(nanos) / 1e9, tz=timezone.utc).isoformat()

    return [
        {
            "id": f"U3Bhbjo{n}",
            "name": s["name"],
            "context": {"trace_id": s["traceId"], "span_id": s["spanId"]},
            "span_kind": "UNKNOWN",
            "parent_id": s.get("parentSpanId"),
            "start_time": iso(s["startTimeUnixNano"]),
            "end_time": iso(s["endTimeUnixNano"]),
            "status_code": "UNSET",
            "status_message": "",
            "attributes": s["attributes"],
            "events": [],
        }
        for n, s in enumerate(spans)
    ]


def test_phoenix_pages_through_cursors(
    demo_file: Path, serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    spans = to_phoenix(raw_spans(demo_file))

    def answer(path: str, query: dict[str, str]) -> tuple[int, Any]:
        assert path == "/v1/projects/default/spans"
        limit, start = int(query["limit"]), int(query.get("cursor", 0))
        end = start + limit
        return 200, {"data": spans[start:end], "next_cursor": str(end) if end < len(spans) else None}

    server = serve(answer)
    document = summary_json(capsys, f"{server.url}/v1/projects/default/spans?limit=20")
    assert len(server.requests) == -(-len(spans) // 20)
    expected = by_pair(summary_json(capsys, demo_file))
    for key, pair in by_pair(document).items():
        assert pair["count"] == expected[key]["count"]
        # first_speech is matched without links (same parent, same start); a reconnect starts when its
        # connection began, so without Phoenix's missing links nothing ties it to its handoff
        assert pair["phases"].keys() == expected[key]["phases"].keys() - {sc.PHASE_RECONNECT}


def test_real_phoenix(demo_file: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """The demo exported over OTLP to a real Phoenix, summarized from its REST API."""
    import receivers

    if receivers.phoenix_executable() is None:
        receivers.missing("Arize Phoenix is not installed")  # skips locally, fails in CI
    project = "otel-handoff-summary"
    with receivers.shared_phoenix(tmp_path_factory) as phoenix:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.grpc_endpoint,
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
        }
        run = subprocess.run(
            [sys.executable, "-m", "otel_handoff", "demo", "--export", "sent.jsonl"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        sent = raw_spans(tmp_path / "sent.jsonl")
        receivers.wait_until(lambda: len(phoenix.spans(project)) >= len(sent), "Phoenix to store the spans")
        url = f"{phoenix.url}/v1/projects/{project}/spans?limit=25"
        summary = _cli("summary", url, "--format", "json", cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    pairs = by_pair(json.loads(summary.stdout))
    assert {key: p["count"] for key, p in pairs.items()} == dict(raw_pairs(tmp_path / "sent.jsonl"))
    assert "first_speech" in pairs[("triage", "billing")]["phases"]
    for pair in pairs.values():
        assert_sane(pair)


def test_summarize_groups_by_framework_and_pair() -> None:
    spans = parse_spans(
        "\n".join(
            json.dumps(
                {
                    "name": "agent_handoff",
                    "context": {"trace_id": f"0x{n:032x}", "span_id": f"0x{n:016x}"},
                    "parent_id": None,
                    "status": {"status_code": "ERROR" if n == 3 else "UNSET"},
                    "attributes": {
                        sc.FRAMEWORK: sc.FRAMEWORK_LIVEKIT,
                        sc.FROM_AGENT_NAME: "a",
                        sc.TO_AGENT_NAME: "b",
                        sc.TRIGGER: "tool" if n % 2 else "api",
                        sc.DURATION: n / 1000,
                        **({sc.OUTCOME: sc.OUTCOME_REJECTED} if n == 2 else {}),
                    },
                }
            )
            for n in range(1, 5)
        )
    )
    (pair,) = summarize(collect_handoffs(spans))
    assert pair.count == 4 and dict(pair.via) == {"api": 2, "tool": 2}
    assert pair.outcomes[sc.OUTCOME_REJECTED] == 1 and pair.outcomes[sc.OUTCOME_ERROR] == 1  # status ERROR
    assert pair.duration is not None
    assert (pair.duration.p50, pair.duration.p95, pair.duration.max) == (0.002, 0.004, 0.004)
    assert pair.duration.mean == pytest.approx(0.0025)


# --- every phase of every framework -------------------------------------------------------------
@pytest.mark.parametrize("framework", [f.key for f in FRAMEWORKS])
def test_summary_shows_every_phase_span_of_each_demo(
    framework: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever phase child or linked span a demo's export holds shows under its pair, by the registry.
    Every framework, none skipped: a framework that cannot share this environment (Google ADK) runs
    its demo with the Python of its own (``tests/environments.py``), and this one's ``summary`` reads it."""
    export = workdir / f"phases-{framework}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    python = environments.python_for(framework)
    run = subprocess.run(
        [python, "-m", "otel_handoff", "demo", "--framework", framework, "--export", export.name],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    spans = raw_spans(export)
    handoffs = {s["spanId"]: s for s in spans if s["name"] == sc.SPAN_HANDOFF}
    expected: dict[tuple[str, str], set[str]] = {}
    for span in spans:
        spec = sc.PHASES_BY_SPAN.get(span["name"])
        if spec is None:
            continue
        owners = [link["spanId"] for link in span.get("links", [])] or [span.get("parentSpanId")]
        for owner in (handoffs[o] for o in owners if o in handoffs):
            a = owner["attributes"]
            pair = (a.get(sc.FROM_AGENT_NAME, "(none)"), a.get(sc.TO_AGENT_NAME, "(none)"))
            expected.setdefault(pair, set()).add(spec.name)
    assert expected or framework == "ag2", "the demo's export holds phase spans (AG2's handoffs have none)"
    document = by_pair(summary_json(capsys, export))
    shown = {pair: set(p["phases"]) for pair, p in document.items()}
    for pair, phases in expected.items():
        assert phases <= shown[pair], (pair, phases - shown[pair])
    assert_columns_and_reasons(export, run.stdout, list(handoffs.values()), document, capsys)


def assert_columns_and_reasons(
    export: Path,
    waterfall: str,
    handoffs: list[dict[str, Any]],
    document: dict[tuple[str, str], dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each rejected handoff's reason in the waterfall, and per pair in summary's JSON, CSV and table,
    whose columns are those of what the file holds: no LiveKit reuse columns without LiveKit."""
    reasons: dict[tuple[str, str], Counter[str]] = {}
    for span in handoffs:
        a = span["attributes"]
        if a.get(sc.OUTCOME) == sc.OUTCOME_REJECTED:
            pair = (a.get(sc.FROM_AGENT_NAME, "(none)"), a.get(sc.TO_AGENT_NAME, "(none)"))
            reasons.setdefault(pair, Counter())[a[sc.REJECTION_REASON]] += 1
            assert f"rejected: {a[sc.REJECTION_REASON]}" in waterfall
    assert "rejected: rejected" not in waterfall
    assert {pair: p["rejection_reasons"] for pair, p in document.items() if p["rejection_reasons"]} == reasons
    assert main(["summary", str(export), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    for row in rows:
        expected = reasons.get((row["from_agent"], row["to_agent"]), {})
        assert row["rejection_reasons"] == " ".join(f"{r}:{n}" for r, n in sorted(expected.items()))
    phases = {phase for p in document.values() for phase in p["phases"]}
    assert {c.removesuffix("_p50_s") for c in rows[0] if c.endswith("_p50_s")} - {
        "duration",
        "heard_delay",
    } == phases
    assert main(["summary", str(export)]) == 0
    table = capsys.readouterr().out.splitlines()
    header = table[table.index("") + 1].split()
    reuse = any(sc.STT_REUSED in span["attributes"] for span in handoffs)
    assert ("stt" in header, "realtime" in header, "turn" in header) == (reuse, reuse, reuse)
    assert ("rej" in header) == bool(reasons)
    for (from_agent, to_agent), counted in reasons.items():
        row = next(line for line in table if f"{from_agent} → {to_agent}" in line)
        assert all(reason in row for reason in counted), row


def test_a_reader_that_stops_early_gets_no_traceback(
    demo_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`otel-handoff summary FILE | head -1` once head has gone: exit 1, no traceback, and nothing
    more written to the closed pipe (Python would say so when it flushes at exit)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away
    stdout = io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["summary", str(demo_file)]) == 1
        stdout.write("what Python flushes at exit\n")
        stdout.flush()  # goes nowhere now, without an error
    finally:
        stdout.close()
    assert "Traceback" not in capsys.readouterr().err


def test_the_heard_delay_where_first_speech_has_one(
    tmp_path: Path, provider: Any, span_exporter: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LiveKit call's first_speech carries the caller's heard delay (an estimate from WebRTC's
    statistics): summary shows it per pair, beside the phases, in every format."""
    from opentelemetry import trace

    from otel_handoff.cli.demo_export import write_otlp_json
    from otel_handoff.cli.summary import HEARD_LABEL, run
    from otel_handoff.core.emit import emit, emit_linked
    from otel_handoff.core.heard import Downlink, attributes
    from otel_handoff.core.metrics import HandoffMetrics
    from otel_handoff.core.record import HandoffRecord, PhaseRecord
    from otel_handoff.core.spans import HandoffTelemetry

    telemetry = HandoffTelemetry(
        tracer=provider.get_tracer("otel_handoff.livekit"),
        metrics=HandoffMetrics(None, "otel_handoff.test"),
        static_attributes={sc.FRAMEWORK: sc.FRAMEWORK_LIVEKIT, sc.FRAMEWORK_VERSION: "1.8.9"},
    )
    link = Downlink(0.002, 0.0004, 0, 0.020, "audio/opus")
    span_exporter.clear()
    call = telemetry.tracer.start_span("call", start_time=0)  # the call's trace, as LiveKit's session
    for n, start in enumerate((1_000_000_000, 9_000_000_000)):
        record = HandoffRecord(
            start_ns=start,
            end_ns=start + 3_000_000,
            sequence=n + 1,
            outcome=sc.OUTCOME_COMPLETED,
            parent=trace.set_span_in_context(call),
            from_agent="triage",
            to_agent="billing",
            phases=[PhaseRecord(sc.START, start, start + 3_000_000)],
        )
        emitted = emit(telemetry, record)
        speech = PhaseRecord(sc.PHASE_FIRST_SPEECH, start, start + 300_000_000, attributes(link))
        emit_linked(telemetry, emitted, speech)
    call.end(end_time=20_000_000_000)
    path = tmp_path / "call.jsonl"
    write_otlp_json(span_exporter.get_finished_spans(), path)

    code, table, _ = run(str(path))
    assert code == 0, table
    [heard_row] = [line for line in table.splitlines() if line.strip().startswith(HEARD_LABEL)]
    assert f"{link_ms(link):.2f}" in heard_row and " 2 " in f" {heard_row} "
    code, document, _ = run(str(path), output_format="json")
    [pair] = json.loads(document)["pairs"]
    assert pair["heard_delay"]["count"] == 2
    assert pair["heard_delay"]["p50"] == pytest.approx(link_ms(link) / 1000)


def link_ms(link: Any) -> float:
    from otel_handoff.core.heard import heard_delay

    return heard_delay(link) * 1000
