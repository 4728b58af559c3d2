"""``OTEL_TRACES_EXPORTER=otel_handoff_file``: an app's spans in a file ``summary`` reads.

Selected by name under ``configure()`` and ``opentelemetry-instrument`` alike (its entry point in
the installed metadata), appended by several real processes to one path, and a bad path said in
one line with the app unaffected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from otel_handoff.cli.span_sources import read_spans
from otel_handoff.export.file import EXPORTER_NAME, PATH_VARIABLE, OtlpJsonFileSpanExporter

PIPE_BUF = 4096  # Linux's


def _env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, **settings}


def test_the_entry_point_is_installed_and_is_ours() -> None:
    from importlib.metadata import entry_points

    found = list(entry_points(group="opentelemetry_traces_exporter", name=EXPORTER_NAME))
    assert [ep.value for ep in found] == ["otel_handoff.export.file:OtlpJsonFileSpanExporter"], (
        "the installed metadata lacks pyproject's entry point: pip install -e . again"
    )
    assert found[0].load() is OtlpJsonFileSpanExporter


# several processes, one path: each export's lines appended whole, none lost
_WRITER = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_handoff.export.file import OtlpJsonFileSpanExporter

    path, writer, exports = sys.argv[1], sys.argv[2], int(sys.argv[3])
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(path)))
    tracer = provider.get_tracer("writer")
    sys.stdin.readline()  # all start together
    for n in range(exports):
        with tracer.start_as_current_span(f"{writer}-{n}", attributes={"padding": writer * 20_000}):
            pass
    provider.shutdown()
    """
)


def test_several_processes_append_to_one_path(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    writers, exports = 4, 60
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), chr(ord("a") + w), str(exports)],
            stdin=subprocess.PIPE,
            env=_env(),
            text=True,
        )
        for w in range(writers)
    ]
    for process in processes:  # each waits for its line, so they write at once
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.close()
    for process in processes:
        assert process.wait(timeout=120) == 0
    lines = path.read_text(encoding="utf-8").splitlines()
    # over PIPE_BUF: POSIX keeps such a write whole on a pipe only; in a file, the lock does
    assert min(len(line) for line in lines) > 4 * PIPE_BUF
    names = [span.name for span in read_spans(str(path))]  # each line parses: none cut into
    assert len(lines) == len(names) == writers * exports
    assert sorted(names) == sorted(f"{chr(ord('a') + w)}-{n}" for w in range(writers) for n in range(exports))


_APP = textwrap.dedent(
    """
    import otel_handoff
    from opentelemetry import trace

    otel_handoff.configure()
    with trace.get_tracer("app").start_as_current_span("app-work"):
        print("the app's own output")
    """
)


@pytest.mark.parametrize("runner", ["configure", "opentelemetry-instrument"])
def test_selected_by_name(runner: str, tmp_path: Path) -> None:
    """``OTEL_TRACES_EXPORTER`` picks it, the path from our variable; stdout stays the app's."""
    path = tmp_path / "spans.jsonl"
    path.write_text("")  # appended to, not replaced
    env = _env(OTEL_TRACES_EXPORTER=EXPORTER_NAME, OTEL_METRICS_EXPORTER="none", **{PATH_VARIABLE: str(path)})
    command = [sys.executable, "-c", _APP]
    if runner == "opentelemetry-instrument":
        command = [str(Path(sys.executable).with_name("opentelemetry-instrument")), *command]
        env["OTEL_LOGS_EXPORTER"] = "none"
    for _ in range(2):
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert (run.returncode, run.stdout, run.stderr) == (0, "the app's own output\n", "")
    assert [span.name for span in read_spans(str(path))] == ["app-work", "app-work"]


@pytest.mark.parametrize("runner", ["configure", "opentelemetry-instrument"])
@pytest.mark.parametrize(
    ("path", "problem"),
    [
        (None, "OTEL_HANDOFF_EXPORT_FILE is not set: set it to the file to append spans to"),
        (
            "missing/spans.jsonl",
            "OTEL_HANDOFF_EXPORT_FILE is 'missing/spans.jsonl', which cannot be opened for appending "
            "(No such file or directory): use a file in a folder that exists and is writable",
        ),
    ],
)
def test_a_bad_path_is_one_line(runner: str, path: str | None, problem: str, tmp_path: Path) -> None:
    env = _env(OTEL_TRACES_EXPORTER=EXPORTER_NAME, OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    if path is not None:
        env[PATH_VARIABLE] = path
    command = [sys.executable, "-c", _APP]
    if runner == "opentelemetry-instrument":
        command = [str(Path(sys.executable).with_name("opentelemetry-instrument")), *command]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (0, "the app's own output\n")
    assert run.stderr == (
        f"otel-handoff: {problem}. No spans are written to a file; the application keeps running.\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_demos_export_writes_the_same_lines(tmp_path: Path) -> None:
    """``demo --export`` replaces its file with what the exporter appends: one request per trace."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_handoff.cli.demo_export import write_otlp_json

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for conversation in ("first", "second"):
        with tracer.start_as_current_span(conversation):
            tracer.start_span(f"{conversation}-child").end()
    spans = memory.get_finished_spans()
    appended, replaced = tmp_path / "appended.jsonl", tmp_path / "replaced.jsonl"
    replaced.write_text("old\n")
    assert OtlpJsonFileSpanExporter(appended).export(spans).name == "SUCCESS"
    write_otlp_json(spans, replaced)
    assert replaced.read_bytes() == appended.read_bytes()
    lines = [json.loads(line) for line in appended.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 2 and all(len(line["resourceSpans"]) == 1 for line in lines)
