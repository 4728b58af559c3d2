"""Spans and bytes per handoff on the wire, per framework: what a collector tier must carry.

Runs each framework's ``otel-handoff demo`` (the real framework offline, ``--export``), reads the
OTLP/JSON it wrote back into ``ExportTraceServiceRequest`` messages and weighs otel-handoff's own
spans (``agent_handoff*``) as the OTLP exporter sends them: protobuf bytes per handoff, plain and
gzip-compressed (``OTEL_EXPORTER_OTLP_COMPRESSION=gzip``), one request per trace as the file holds
them. The framework's own spans in the same traces are reported beside them, for scale.

    python bench/wire_size.py        # ~20 s; writes bench/results/wire_size.md
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_handoff.cli import otlp_json
from otel_handoff.core import schema as sc

FRAMEWORKS = ["livekit", "ag2", "pipecat", "openai-agents"]
RESULTS = Path(__file__).resolve().parent / "results" / "wire_size.md"


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


def measure(framework: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "spans.jsonl"
        subprocess.run(
            [sys.executable, "-m", "otel_handoff", "demo", "--framework", framework, "--export", str(export)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        requests = [otlp_json.parse_request(json.loads(line)) for line in export.read_text().splitlines()]
    handoffs = ours = theirs = 0
    plain = zipped = their_bytes = 0
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
    return {
        "handoffs": handoffs,
        "spans": ours / handoffs,
        "bytes": plain / handoffs,
        "gzip": zipped / handoffs,
        "framework_spans": theirs / handoffs,
        "framework_bytes": their_bytes / handoffs,
    }


def main() -> None:
    rows = [
        "| framework (demo) | handoffs | our spans / handoff | bytes / handoff | gzip | "
        "the framework's own spans / handoff (bytes) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for framework in FRAMEWORKS:
        m = measure(framework)
        rows.append(
            f"| {framework} | {m['handoffs']:.0f} | {m['spans']:.1f} | {m['bytes']:,.0f} | "
            f"{m['gzip']:,.0f} | {m['framework_spans']:.1f} ({m['framework_bytes']:,.0f}) |"
        )
    table = "\n".join(rows)
    print(table)
    RESULTS.write_text(f"# Spans and bytes per handoff on the wire (bench/wire_size.py)\n\n{table}\n")


if __name__ == "__main__":
    main()
