"""Handoff metrics, shared by every framework's instrumentor.

Spans answer "what happened in this call"; these answer "how are handoffs doing across
calls". Attributes are a bounded subset of the span's (agent labels, trigger, outcome,
reuse flags): never ids or anything per call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.context import Context

from ..version import __version__
from . import schema as sc

_METRIC_KEYS = frozenset(sc.METRIC_ATTRIBUTES)
_PHASE_METRIC_KEYS = frozenset(sc.PHASE_METRIC_ATTRIBUTES)
_UNREACHABLE_KEYS = frozenset(sc.UNREACHABLE_METRIC_ATTRIBUTES)


class HandoffMetrics:
    """The two histograms and the unreachable-call counter, created once per ``instrument()``; a
    handoff count is the duration's count."""

    def __init__(self, meter_provider: metrics.MeterProvider | None, scope: str, phases: bool = True) -> None:
        """``phases`` False: no ``agent_handoff.phase.duration`` points (for fleets that pay per
        series); the handoffs' own duration points and every span stay as they are."""
        self.phases = phases
        meter = metrics.get_meter(scope, __version__, meter_provider)
        self._duration = meter.create_histogram(
            sc.METRIC_DURATION,
            unit="s",
            description="Handoff time: leaving the old agent plus starting the new one, no waits.",
            explicit_bucket_boundaries_advisory=sc.DURATION_BUCKETS,
        )
        self._phase = meter.create_histogram(
            sc.METRIC_PHASE_DURATION,
            unit="s",
            description="Time of one phase of a handoff (queue and lock waits, drain, start, on_enter...).",
            explicit_bucket_boundaries_advisory=sc.DURATION_BUCKETS,
        )
        self._unreachable = meter.create_counter(
            sc.METRIC_UNREACHABLE_CALLS,
            unit="{call}",
            description="Handoff tool calls the framework refused before any handoff: a target this agent "
            "may not reach.",
        )
        # metrics turned off (a NoOp meter provider): a handoff does not even pick attributes
        self.enabled = not (
            all(isinstance(instrument, metrics.NoOpHistogram) for instrument in (self._duration, self._phase))
            and isinstance(self._unreachable, metrics.NoOpCounter)
        )

    def record_handoff(self, seconds: float, span_attributes: Mapping[str, Any], handoff: Context) -> None:
        """``handoff``: a context holding the handoff span, so exemplars link to that span."""
        if not self.enabled:
            return
        attributes = _pick(span_attributes, _METRIC_KEYS)
        self._duration.record(seconds, attributes, context=handoff)

    def record_phases(
        self, phases: Iterable[tuple[str, float]], span_attributes: Mapping[str, Any], handoff: Context
    ) -> None:
        """Several phases of one handoff: its attributes are picked once."""
        if not (self.enabled and self.phases):
            return
        common = _pick(span_attributes, _PHASE_METRIC_KEYS)
        for phase, seconds in phases:
            self._phase.record(seconds, {**common, sc.PHASE: phase}, context=handoff)

    def count_unreachable(self, attributes: Mapping[str, Any], calls: int = 1) -> None:
        """Refused handoff calls make no span (there was no handoff): this count is all that shows
        them. Only bounded attributes are kept: a model can name any target."""
        if not self.enabled:
            return
        self._unreachable.add(calls, _pick(attributes, _UNREACHABLE_KEYS))


def _pick(attributes: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """The span's attributes among ``keys``, picked in C (set intersection, ``map``, ``zip``): the
    SDK's own work per point is what a handoff's metrics should cost, not a loop of ours."""
    present = keys.intersection(attributes)
    return dict(zip(present, map(attributes.__getitem__, present), strict=True))
