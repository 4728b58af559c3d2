"""What every real call of the suite (LiveKit's, Pipecat's) holds its trace in Jaeger to.

A call's spans come back from Jaeger's query API as :class:`receivers.Span` dicts (microseconds);
these checks read them the same way whichever framework made them.
"""

from __future__ import annotations

from typing import Any

from receivers import Span

GAP_US = 1_000  # uncovered time between a handoff's phases that the span must then report
ROUNDING_US = 1  # Jaeger keeps microseconds: each span boundary may be off by one
UNATTRIBUTED = "agent_handoff.unattributed.duration"


def end_us(span: Span) -> int:
    return span["start_us"] + span["duration_us"]


def accounting_problems(label: str, span: Span, phases: list[Span]) -> list[str]:
    """Between the handoff's start, its phases and its end no gap reaches 1 ms, unless the span
    says how long it could not attribute (``agent_handoff.unattributed.duration``): then the
    phases and that add up to the span's duration."""
    start, end = span["start_us"], end_us(span)
    covered, cursor, gaps = 0, start, []
    for phase in phases:
        begin, finish = max(phase["start_us"], cursor), min(end_us(phase), end)
        if begin > cursor:
            gaps.append((phase["name"], begin - cursor))
        if finish > begin:
            # a phase the framework's own span stood for (LiveKit 1.8.2+): placed by that span's end,
            # it counts its seconds on the handoff, not where it lies
            covered += phase["duration_us"] if phase.get("stood_for") else finish - begin
            cursor = finish
    if end > cursor:
        gaps.append(("the end", end - cursor))
    wide = [(name, us) for name, us in gaps if us >= GAP_US]
    unattributed = span["attributes"].get(UNATTRIBUTED)
    if unattributed is None:
        return [f"{label}: gaps of ≥ 1 ms before {wide} (µs) and no {UNATTRIBUTED}"] if wide else []
    if abs(covered + unattributed * 1e6 - span["duration_us"]) > ROUNDING_US * (2 * len(phases) + 2):
        return [
            f"{label}: phases {covered} µs + unattributed {unattributed * 1e6:.0f} µs"
            f" ≠ the span's {span['duration_us']} µs"
        ]
    return []


def jaeger_warnings(label: str, spans: list[Span], warnings: dict[str, Any]) -> list[str]:
    """What ``/api/traces/<id>`` notes on a span of ours (e.g. a child outliving its parent)."""
    return [
        f"{label}: {span['name']}: {warnings[span['span_id']]}"
        for span in spans
        if span["name"].startswith("agent_handoff") and span["span_id"] in warnings
    ]
