"""The core piece for handoffs that cross a process (core.crossing): a span started when the handoff
begins, its context carried in a request, the receiving process's spans under it, and one
``agent_handoff`` in all once the emitter finishes it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, TraceFlags
from support import Spans

from otel_handoff.core import crossing
from otel_handoff.core import schema as sc
from otel_handoff.core.emit import emit
from otel_handoff.core.record import HandoffRecord, PhaseRecord
from otel_handoff.core.spans import HandoffTelemetry

MS = 1_000_000
US = 1_000
T0 = 1_700_000_000_000_000_000

# the receiving process: its own SDK, the carrier on stdin, one span inside `received`
RECEIVER = textwrap.dedent(
    """
    import json, sys, time
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from otel_handoff.core import crossing

    trace.set_tracer_provider(TracerProvider())
    carrier = json.load(sys.stdin)
    with crossing.received(carrier, time.time_ns()) as context:
        with trace.get_tracer("receiver").start_as_current_span("remote_setup") as span:
            parent = span.parent
    print(json.dumps({
        "attached": context is not None,
        "trace_id": span.get_span_context().trace_id,
        "parent_id": parent.span_id if parent else None,
        "remote_parent": bool(parent and parent.is_remote),
    }))
    """
)


def _receive(carrier: dict[str, str]) -> dict[str, object]:
    command = [sys.executable, "-c", RECEIVER]
    done = subprocess.run(command, input=json.dumps(carrier), capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_receiving_process_spans_go_under_the_open_handoff(
    telemetry: HandoffTelemetry, spans: Spans
) -> None:
    before = otel_context.get_current()
    opened = crossing.open_handoff(telemetry, T0, otel_context.get_current())
    assert otel_context.get_current() is before  # never made current: the app's context is untouched
    carrier: dict[str, str] = {"app": "kept"}
    crossing.inject(carrier, opened.context)
    assert "traceparent" in carrier
    assert carrier["app"] == "kept"

    received = _receive(carrier)

    assert spans.named(sc.SPAN_HANDOFF) == []  # not ended before its record is emitted
    link = Link(SpanContext(0x1, 0x2, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)))
    record = HandoffRecord(
        start_ns=T0,
        end_ns=T0 + 10 * MS,
        sequence=1,
        outcome=sc.OUTCOME_COMPLETED,
        parent=None,
        from_agent="triage",
        to_agent="billing",
        links=[link],
        phases=[PhaseRecord(sc.PHASE_SETUP, T0 + 2 * MS, T0 + 9 * MS)],
        opened=opened,
    )
    emitted = emit(telemetry, record)

    (handoff,) = spans.named(sc.SPAN_HANDOFF)
    assert handoff.context.span_id == opened.span.get_span_context().span_id == emitted.span_context.span_id
    assert (handoff.start_time, handoff.end_time) == (T0, T0 + 10 * MS)
    assert handoff.attributes[sc.FROM_AGENT_NAME] == "triage"
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert [child.name for child in spans.children(handoff)] == [sc.PHASES[sc.PHASE_SETUP].span]
    assert [span_link.context.span_id for span_link in handoff.links] == [0x2]
    assert received == {
        "attached": True,
        "trace_id": handoff.context.trace_id,
        "parent_id": handoff.context.span_id,
        "remote_parent": True,
    }


def test_a_carrier_without_context_changes_nothing() -> None:
    before = otel_context.get_current()
    with crossing.received({"traceparent": "garbage"}, T0) as context:
        assert context is None
        assert otel_context.get_current() is before
    assert crossing.extract({}) is None
    assert _receive({})["attached"] is False


def test_an_abandoned_handoff_span_is_ended(telemetry: HandoffTelemetry, spans: Spans) -> None:
    opened = crossing.open_handoff(telemetry, T0, otel_context.get_current())
    crossing.abandon(opened, T0 + MS)
    (handoff,) = spans.named(sc.SPAN_HANDOFF)
    assert handoff.end_time == T0 + MS
    assert not trace.get_current_span().get_span_context().is_valid


def test_requests_a_task_sends_carry_its_open_handoff_until_its_span_ends(
    telemetry: HandoffTelemetry,
) -> None:
    import contextvars

    def in_a_task_of_its_own() -> None:
        current = otel_context.get_current()
        assert crossing.outgoing(T0) is current  # no handoff noted: the current context (a delegation)
        opened = crossing.open_handoff(telemetry, T0, otel_context.get_current())
        holder = crossing.sending(opened)
        assert otel_context.get_current() is current  # OpenTelemetry's context untouched
        assert crossing.outgoing(T0 + 5 * US) is opened.context
        assert crossing.outgoing(T0 + 7 * US) is opened.context
        assert holder.sent_ns == T0 + 5 * US  # the first request's time
        holder.ended = True  # over (its span may be sampled out: no end time to read)
        assert crossing.outgoing(T0 + 8 * US) is otel_context.get_current()
        holder.ended = False
        crossing.abandon(opened, T0 + 8 * US)
        assert crossing.outgoing(T0 + 9 * US) is otel_context.get_current()  # ended: carried no more

    contextvars.copy_context().run(in_a_task_of_its_own)
    assert crossing.outgoing(T0) is otel_context.get_current()  # the noting stayed in that context


def test_the_serving_side_makes_remote_setup_under_the_callers_handoff(
    telemetry: HandoffTelemetry, spans: Spans
) -> None:
    opened = crossing.open_handoff(telemetry, T0, otel_context.get_current())
    carrier: dict[str, str] = {}
    crossing.inject(carrier, opened.context)
    crossing.serving_started(telemetry, T0)  # outside a request received with a context: nothing
    with crossing.received(carrier, T0 + 2 * US) as context:
        assert context is not None
        assert trace.get_current_span().get_span_context().span_id == opened.span.get_span_context().span_id
        crossing.serving_started(telemetry, T0 + 5 * US)
        crossing.serving_started(telemetry, T0 + 6 * US)  # once per request
    assert not trace.get_current_span().get_span_context().is_valid
    (setup,) = spans.named(sc.SPAN_REMOTE_SETUP)
    assert setup.parent.span_id == opened.span.get_span_context().span_id
    assert (setup.start_time, setup.end_time) == (T0 + 2 * US, T0 + 5 * US)
    assert setup.attributes[sc.REMOTE_SETUP_DURATION] == pytest.approx(3e-6)
    crossing.abandon(opened, T0 + 9 * US)
    # a server whose own tracing already continued the caller's trace keeps its span current
    with (
        trace.get_tracer("server").start_as_current_span("POST /", context=crossing.extract(carrier)) as http,
        crossing.received(carrier, T0),
    ):
        assert trace.get_current_span() is http
    with crossing.received({}, T0) as context:
        assert context is None
