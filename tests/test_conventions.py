"""The suite-wide convention scan can fail: it catches an ERROR span without ``error.type``, an
``exception`` event, a ``gen_ai.*`` attribute the GenAI conventions do not define and a failed
or rejected handoff whose status is not ERROR.

Every test of the suite runs under it (``conftest.one_error_convention_and_no_made_up_gen_ai``),
so every ERROR span of every framework's tests carries ``error.type``.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Status, StatusCode
from support import ConventionScan

from otel_handoff.core import schema as sc
from otel_handoff.core.emit import emit
from otel_handoff.core.instrumentor import HandoffInstrumentor
from otel_handoff.core.record import HandoffRecord, PhaseRecord
from otel_handoff.core.spans import HandoffTelemetry


def test_scan_catches_what_breaks_the_conventions(provider: Any, convention_scan: ConventionScan) -> None:
    before = len(convention_scan.violations)
    tracer = provider.get_tracer("otel_handoff.test")
    with tracer.start_as_current_span("agent_handoff") as span:
        span.set_attribute("gen_ai.handoff.from_agent", "triage")  # the name 0.1 used
        span.set_status(Status(StatusCode.ERROR, "boom"))
        span.add_event("exception", {"exception.type": "ValueError"})
    with tracer.start_as_current_span("agent_handoff") as span:
        span.set_attribute(sc.OUTCOME, sc.OUTCOME_REJECTED)  # a refusal left UNSET (OpenAI's, once)
    found = convention_scan.violations[before:]
    del convention_scan.violations[before:]  # planted on purpose
    assert found == [
        "agent_handoff: gen_ai.handoff.from_agent is not a GenAI semconv attribute",
        "agent_handoff: status ERROR without error.type",
        "agent_handoff: an exception event (error.type is the convention)",
        "agent_handoff: outcome rejected without status ERROR",
    ]


def test_the_one_emitter_follows_the_convention_for_every_error_shape(
    provider: Any, convention_scan: ConventionScan, spans: Any
) -> None:
    """An exception, an error type string, a failed phase: each ERROR span gets error.type only."""
    tracer, metrics = HandoffInstrumentor.telemetry_parts("otel_handoff.test", {"tracer_provider": provider})
    telemetry = HandoffTelemetry(tracer, metrics, HandoffInstrumentor.static_attributes("test", "1.0"))
    checked = convention_scan.errors_checked
    for error in (ValueError("caller said: my card is 4111"), sc.ERROR_TIMEOUT):
        emit(
            telemetry,
            HandoffRecord(
                start_ns=1,
                end_ns=2,
                sequence=1,
                outcome=sc.OUTCOME_ERROR,
                parent=None,
                error=error,
                phases=[PhaseRecord(sc.START, 1, 2, error=error)],
            ),
        )
    assert convention_scan.errors_checked - checked == 4
    types = {s.attributes[sc.ERROR_TYPE] for s in spans.all() if s.status.status_code is StatusCode.ERROR}
    assert types == {"ValueError", "timeout"}
    assert all("4711" not in (s.status.description or "") for s in spans.all())


def test_a_rejected_handoff_is_an_error_whatever_the_framework_filled(
    provider: Any, convention_scan: ConventionScan, spans: Any
) -> None:
    """The emitter, not each framework, makes a refusal ERROR with ``error.type`` = ``rejected``."""
    tracer, metrics = HandoffInstrumentor.telemetry_parts("otel_handoff.test", {"tracer_provider": provider})
    telemetry = HandoffTelemetry(tracer, metrics, HandoffInstrumentor.static_attributes("test", "1.0"))
    emit(telemetry, HandoffRecord(start_ns=1, end_ns=2, sequence=1, outcome=sc.OUTCOME_REJECTED, parent=None))
    [handoff] = spans.handoffs()
    assert handoff.status.status_code is StatusCode.ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == sc.OUTCOME_REJECTED
