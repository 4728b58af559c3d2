"""Spans and bytes per handoff on the wire, per framework: what a collector tier must carry.

Runs each framework's ``otel-handoff demo`` (the real framework offline, ``--export``), reads the
OTLP/JSON it wrote back into ``ExportTraceServiceRequest`` messages and weighs otel-handoff's own
spans (``agent_handoff*``) as the OTLP exporter sends them: protobuf bytes per handoff, plain and
gzip-compressed (``OTEL_EXPORTER_OTLP_COMPRESSION=gzip``), one request per trace as the file holds
them. The framework's own spans in the same traces are reported beside them, and both together
(what the backend gets of the demo; where LiveKit spans a handoff itself, ours do not repeat it). Every
framework of the registry; one whose demo this Python cannot import runs with the Python of its own
environment, ``.venv-KEY`` beside this checkout (the suite makes ``.venv-google-adk``).

    python bench/wire_size.py        # ~30 s; writes bench/results/wire_size.md
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_handoff.core import schema as sc
from otel_handoff.core.frameworks import FRAMEWORKS, Framework
from otel_handoff.export import otlp_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "wire_size.md"


def python_for(framework: Framework) -> str:
    """This Python, or that of the framework's own environment when its demo cannot import here."""
    try:
        here = importlib.util.find_spec(framework.demo_module) is not None
    except ImportError:
        here = False
    own = ROOT / f".venv-{framework.key}" / "bin" / "python"
    return sys.executable if here or not own.exists() else str(own)


def only(request: ExportTraceServiceRequest, ours: bool) -> ExportTraceServiceRequest:
    """The request with only our spans (``ours``) or only the framework's."""
    kept = ExportTraceServiceRequest()
    kept.CopyFrom(request)
    for resource_spans in kept.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            spans = [s for s in scope_spans.spans if s.name.startswith(sc.SPAN_HANDOFF) == ours]
            del scope_spans.spans[:]
            scope_spans.spans.extend(spans)
    return kept


def measure(framework: Framework) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "spans.jsonl"
        python = python_for(framework)
        subprocess.run(
            [python, "-m", "otel_handoff", "demo", "--framework", framework.key, "--export", str(export)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        requests = [otlp_json.parse_request(json.loads(line)) for line in export.read_text().splitlines()]
    handoffs = ours = theirs = 0
    plain = zipped = their_bytes = both_bytes = 0
    for request in requests:
        mine = only(request, ours=True)
        spans = [s for rs in mine.resource_spans for ss in rs.scope_spans for s in ss.spans]
        handoffs += sum(1 for s in spans if s.name == sc.SPAN_HANDOFF)
        ours += len(spans)
        wire = mine.SerializeToString()
        plain += len(wire)
        zipped += len(gzip.compress(wire))
        others = only(request, ours=False)
        theirs += sum(len(ss.spans) for rs in others.resource_spans for ss in rs.scope_spans)
        their_bytes += len(others.SerializeToString())
        both_bytes += len(request.SerializeToString())
    return {
        "handoffs": handoffs,
        "spans": ours / handoffs,
        "bytes": plain / handoffs,
        "gzip": zipped / handoffs,
        "framework_spans": theirs / handoffs,
        "framework_bytes": their_bytes / handoffs,
        "together_bytes": both_bytes / handoffs,
    }


def main() -> None:
    rows = [
        "| framework (demo) | handoffs | our spans / handoff | bytes / handoff | gzip | "
        "the framework's own spans / handoff (bytes) | together (bytes) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for framework in FRAMEWORKS:
        m = measure(framework)
        rows.append(
            f"| {framework.key} | {m['handoffs']:.0f} | {m['spans']:.1f} | {m['bytes']:,.0f} | "
            f"{m['gzip']:,.0f} | {m['framework_spans']:.1f} ({m['framework_bytes']:,.0f}) | "
            f"{m['spans'] + m['framework_spans']:.1f} ({m['together_bytes']:,.0f}) |"
        )
    table = "\n".join(rows)
    print(table)
    RESULTS.write_text(f"# Spans and bytes per handoff on the wire (bench/wire_size.py)\n\n{table}\n")


if __name__ == "__main__":
    main()
