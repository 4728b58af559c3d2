"""Strands Agents over A2A: an ``A2AAgent`` calling an agent another process serves with
``A2AServer`` (``strands-agents[a2a]``, a2a-sdk 0.3). A delegation, not a handoff: no
``agent_handoff``, but the request carries the caller's trace context (``otel_handoff.core.a2a``,
switched on by Strands' instrumentor) and the server, traced with no code
(``OTEL_HANDOFF_AUTO_INSTRUMENT``), runs the agent under it: one trace. Runs in Strands' environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("strands", reason="strands-agents runs in its own environment (test_environments)")
pytest.importorskip("a2a", reason="a2a-sdk: strands-agents[a2a]")

from opentelemetry.sdk.trace import TracerProvider
from support import Spans

from otel_handoff.cli.offline import strands_remote as sr
from otel_handoff.cli.span_sources import read_spans
from otel_handoff.core import schema as sc
from otel_handoff.strands import StrandsHandoffInstrumentor

QUESTION = "Was my last invoice paid?"


def _auto(export: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    return base | {
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_TRACES_EXPORTER": "otel_handoff_file",
        "OTEL_HANDOFF_EXPORT_FILE": str(export),
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "billing",
    }


async def test_a_delegation_over_a2a_joins_the_callers_trace(
    instrument: Any, spans: Spans, provider: TracerProvider, tmp_path: Path
) -> None:
    import httpx
    from a2a.client import ClientConfig
    from strands.agent.a2a_agent import A2AAgent

    instrument(StrandsHandoffInstrumentor)
    sent: list[httpx.Headers] = []

    async def note(request: httpx.Request) -> None:
        if request.method == "POST":
            sent.append(request.headers)

    server_file = tmp_path / "server.jsonl"
    with sr.remote_billing(env=_auto(server_file)) as url:
        async with httpx.AsyncClient(event_hooks={"request": [note]}, timeout=60) as client:
            remote = A2AAgent(endpoint=url, client_config=ClientConfig(httpx_client=client))
            with provider.get_tracer("app").start_as_current_span("app request") as app:
                result = await remote.invoke_async(QUESTION)
    assert sr.ANSWER in str(result), "the app itself must still work"
    trace_id = app.get_span_context().trace_id
    [headers] = sent
    assert headers["traceparent"].split("-")[1] == f"{trace_id:032x}"
    ours = {f"{s.context.span_id:016x}" for s in spans.all()}
    assert headers["traceparent"].split("-")[2] in ours  # the span current at the call
    assert spans.handoffs() == []  # a delegation
    served = read_spans(str(server_file))
    agent_spans = [s for s in served if s.name == "invoke_agent billing"]
    assert agent_spans, sorted({s.name for s in served})
    assert all(s.trace_id == f"{trace_id:032x}" for s in agent_spans)
    ids = {s.span_id for s in served}
    tops = [s for s in served if s.trace_id == f"{trace_id:032x}" and s.parent_id not in ids]
    assert tops and all(s.parent_id in ours for s in tops)  # under the caller's span
    assert not any(s.name.startswith(sc.SPAN_HANDOFF) for s in served)
