"""Handoff metrics after real offline handoffs, read back with an in-memory metric reader."""

from __future__ import annotations

from typing import Any

from livekit.agents import AgentSession
from lk_agents import Billing, Support, Triage, slow
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from support import Spans

from otel_handoff.cli.offline.livekit import ScriptedLLM
from otel_handoff.core import schema as sc
from otel_handoff.livekit._features import detect


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else []:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != "otel_handoff":  # one meter for every framework
                continue
            for metric in scope_metrics.metrics:
                ours = [
                    p for p in metric.data.data_points if p.attributes.get(sc.FRAMEWORK) == "livekit-agents"
                ]
                found[metric.name] = (metric, ours)
    return found


async def test_metrics_after_real_handoffs(instrumented: Spans, metric_reader: InMemoryMetricReader) -> None:
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    await session.start(agent=Triage(exit=slow(0.01)))
    await session.run(user_input="billing please")  # tool: triage -> billing
    session.update_agent(Support())  # api: billing -> support
    session.update_agent(Billing())  # api: support -> billing, queued behind the previous one
    await session._update_activity_atask
    await session._activity._on_enter_task
    await session.aclose()

    metrics = points(metric_reader)
    duration, duration_points = metrics[sc.METRIC_DURATION]
    assert duration.unit == "s"
    assert list(duration_points[0].explicit_bounds) == list(sc.DURATION_BUCKETS)
    by_pair = {(p.attributes[sc.FROM_AGENT_NAME], p.attributes[sc.TO_AGENT_NAME]): p for p in duration_points}
    triage, billing, support = Triage().label, Billing().label, Support().label
    assert set(by_pair) == {(triage, billing), (billing, support), (support, billing)}
    assert by_pair[(triage, billing)].attributes[sc.TRIGGER] == "tool"
    assert by_pair[(triage, billing)].sum >= 0.01  # the slow on_exit is in the drain
    assert all(p.count == 1 for p in duration_points)
    # exemplars point at the handoff span itself, so a dashboard links a slow bucket to its trace
    handoff_ids = {h.context.span_id for h in instrumented.handoffs()}
    for p in duration_points:
        assert [e.span_id for e in p.exemplars if e.span_id in handoff_ids], p.exemplars

    # how many handoffs, by outcome: the duration histogram's count (there is no separate counter)
    assert sum(p.count for p in duration_points) == 3
    assert {p.attributes[sc.OUTCOME] for p in duration_points} == {"completed"}
    assert "agent_handoff.count" not in metrics

    phase, phase_points = metrics[sc.METRIC_PHASE_DURATION]
    assert phase.unit == "s"
    phases = {}
    for p in phase_points:
        phases[p.attributes[sc.PHASE]] = phases.get(p.attributes[sc.PHASE], 0) + p.count
    assert phases["drain"] == phases["close"] == phases["start"] == phases["on_enter"] == 3
    if detect().queue_wait:
        assert phases["queue_wait"] == 1

    # bounded cardinality: no ids, sequence numbers or tool call ids in any metric attribute
    allowed = set(sc.METRIC_ATTRIBUTES) | {sc.PHASE}
    for _, data_points in metrics.values():
        for p in data_points:
            assert set(p.attributes) <= allowed, set(p.attributes) - allowed
