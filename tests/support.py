"""What the tests share that is not a fixture: span queries and the suite-wide span checks.

The fixtures themselves (providers, readers, scans, instrumentors, a collector) are in
``conftest.py``; tests take them as fixtures.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from otel_handoff.core import schema as sc


class Spans:
    """Finished spans of one test, with the queries the tests need."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self._exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self._exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return sorted((s for s in self.all() if s.name == name), key=lambda s: s.start_time)

    def handoffs(self) -> list[ReadableSpan]:
        return sorted(self.named(sc.SPAN_HANDOFF), key=lambda s: s.attributes[sc.SEQUENCE])

    def children(self, parent: ReadableSpan, name: str | None = None) -> list[ReadableSpan]:
        found = [
            s
            for s in self.all()
            if s.parent is not None
            and s.parent.span_id == parent.context.span_id
            and (name is None or s.name == name)
        ]
        return sorted(found, key=lambda s: s.start_time)

    def phases(self, handoff: ReadableSpan, name: str | None = None) -> list[Any]:
        """The handoff's phases in start order, as the waterfall draws them: its phase children,
        and those LiveKit's own spans stood for (1.8.2+), from their seconds on the handoff."""
        from otel_handoff.cli.waterfall import handoff_phases

        return [p for p in handoff_phases(handoff, self.all()) if name is None or p.name == name]

    def by_id(self, span_id: int) -> ReadableSpan | None:
        return next((s for s in self.all() if s.context.span_id == span_id), None)


# attributes every LiveKit `agent_handoff` span carries (the README's span table)
HANDOFF_ALWAYS = (
    sc.GEN_AI_OPERATION_NAME,
    sc.FROM_AGENT_NAME,
    sc.TO_AGENT_NAME,
    sc.FROM_AGENT_ID,
    sc.TO_AGENT_ID,
    sc.FRAMEWORK,
    sc.FRAMEWORK_VERSION,
    sc.PREVIOUS_ACTIVITY,
    sc.NEW_ACTIVITY,
    sc.TRIGGER,
    sc.STT_REUSED,
    sc.REALTIME_SESSION_REUSED,
    sc.TURN_DETECTOR_REUSED,
    sc.QUEUE_WAIT_DURATION,
    sc.LOCK_WAIT_DURATION,
    sc.DURATION,
    sc.OUTCOME,
    sc.SEQUENCE,
)


class OpenSpans(SpanProcessor):
    """Tracks spans started and not yet ended, to prove every span we start is ended."""

    def __init__(self) -> None:
        self.open: dict[int, ReadableSpan] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.open[span.context.span_id] = span

    def on_end(self, span: ReadableSpan) -> None:
        self.open.pop(span.context.span_id, None)

    def ours(self) -> list[ReadableSpan]:
        return [s for s in self.open.values() if s.name.startswith(sc.SPAN_HANDOFF)]


# every instruction, user utterance, tool argument and tool result the tests feed the frameworks
PRIVATE_TEXTS = (
    "You route the caller",
    "You help the caller",
    "You are A.",
    "You are B.",
    "Collect an email address",
    "Hand over at once",
    "I have a billing question",
    "billing please",
    "take my email",
    "transfer me",
    "someone@example.com",
    "checking your account",
    "order_id",
    "You handle billing questions",
    "Greet the caller",
    "I want a refund for order 4711",
    "Route the customer",
    "Handle refunds",
    "Refunded order",
    "my card is 4111",
    # ag2 1.x workflow channels: the seed, model replies, Handoff.reason, Finish.summary and reason
    "charged twice",
    "disputes invoice",
    "refunded order 4711",
    "customer satisfied",
    "moving you to billing",
    "supervisor here",
    "vip desk here",
    # OpenAI Agents SDK: input, instructions, replies, the handoff's arguments
    "double charged",
    "billing questions for ACME",
    "Billing here",
    "Refunds here",
    "all settled",
    # Pipecat Flows: node role and task messages
    "You are the ",
    "Help at the ",
    # Google ADK: instructions, replies, the model-written transfer reason
    "You are billing",
    "You are triage",
    "invoice was paid",
    "asked about an invoice",
    # LangGraph: prompts, replies, the handoff tools' messages
    "You are the supervisor",
    "Your last invoice",
    "Billing checked the invoice",
    "Successfully transferred",
    "the CRM is down",
)


class PrivacyScan(SpanProcessor):
    """Scans every attribute and event of every span we emit, in every test, for private text."""

    def __init__(self) -> None:
        self.scanned = 0
        self.leaks: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope.name if span.instrumentation_scope else ""
        if not scope.startswith("otel_handoff"):
            return
        self.scanned += 1
        values = [*(span.attributes or {}).items()]
        for event in span.events:
            values += [(f"{event.name}.{k}", v) for k, v in (event.attributes or {}).items()]
        for key, value in values:
            text = str(value)
            self.leaks += [f"{span.name} {key}: {p!r}" for p in PRIVATE_TEXTS if p in text]


# the GenAI semantic-convention attributes our spans may carry; any other gen_ai.* would be ours,
# squatting in the conventions' namespace
GEN_AI_DEFINED = {
    sc.GEN_AI_OPERATION_NAME,
    sc.GEN_AI_TOOL_NAME,
    sc.GEN_AI_TOOL_CALL_ID,
    sc.GEN_AI_CONVERSATION_ID,
}


# instrumentations whose spans our handoff still outlives, said in docs/export.md: openinference's
# agent spans (OpenAI Agents SDK: ended after ours was made, with an earlier time; Google ADK: two
# levels of agent spans over the transferring agent's, both over before the handoff), ag2's envelopes
ENDED_LATER_WITH_AN_EARLIER_TIME = (
    "gcp.vertex.agent",  # Google ADK 1.x's model-call span over a refused transfer (2.x: none)
    "openinference.instrumentation.google_adk",
    "openinference.instrumentation.openai_agents",
    "opentelemetry.instrumentation.ag2",
)


class ConventionScan(SpanProcessor):
    """Every span we emit, in every test: one error convention, no made-up gen_ai.* attributes."""

    def __init__(self) -> None:
        self.errors_checked = 0
        self.handoffs_accounted = 0
        self.violations: list[str] = []
        # handoff span id -> its children so far: (start, end, name)
        self._phases: dict[int, list[tuple[int, int, str]]] = {}
        self._ended: dict[int, int] = {}  # handoff span id -> its end
        # span id -> (name, end, has a parent, instrumentation scope)
        self._any_ended: dict[int, tuple[str, int, bool, str]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # a span id seen again (hypothesis seeds `random`, so the SDK's ids repeat across its examples)
        self._ended.pop(span.context.span_id, None)
        self._any_ended.pop(span.context.span_id, None)

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope.name if span.instrumentation_scope else ""
        self._any_ended[span.context.span_id] = (span.name, span.end_time, span.parent is not None, scope)
        if not scope.startswith("otel_handoff"):
            return
        attributes = span.attributes or {}
        parent = self._any_ended.get(span.parent.span_id) if span.parent is not None else None
        # a span of ours ending after its parent is what Jaeger flags (clock skew): where the
        # parent had ended when ours was made, ours went one level up (core/emit.py); a root
        # has nothing above it, and some frameworks end theirs later with an earlier time
        if (
            parent is not None
            and span.end_time > parent[1]
            and parent[2]
            and not parent[3].startswith(ENDED_LATER_WITH_AN_EARLIER_TIME)
        ):
            self.violations.append(f"{span.name}: ends after its parent {parent[0]}")
        self._check_accounting(span, attributes)
        self.violations += [
            f"{span.name}: {key} is not a GenAI semconv attribute"
            for key in attributes
            if key.startswith("gen_ai.") and key not in GEN_AI_DEFINED
        ]
        outcome = attributes.get(sc.OUTCOME)
        if (
            outcome in (sc.OUTCOME_ERROR, sc.OUTCOME_REJECTED)
            and span.status.status_code is not StatusCode.ERROR
        ):
            self.violations.append(f"{span.name}: outcome {outcome} without status ERROR")
        if span.status.status_code is StatusCode.ERROR:
            self.errors_checked += 1
            if not attributes.get(sc.ERROR_TYPE):
                self.violations.append(f"{span.name}: status ERROR without {sc.ERROR_TYPE}")
            if any(event.name == "exception" for event in span.events):
                self.violations.append(f"{span.name}: an exception event (error.type is the convention)")

    def _check_accounting(self, span: ReadableSpan, attributes: Any) -> None:
        """No phase outlives its handoff; phases and ``agent_handoff.unattributed.duration`` cover it."""
        parent = span.parent.span_id if span.parent is not None else None
        if span.name != sc.SPAN_HANDOFF:
            if parent in self._ended and span.end_time > self._ended[parent]:
                self.violations.append(f"{span.name}: ends after its agent_handoff")
            elif parent is not None:
                self._phases.setdefault(parent, []).append((span.start_time, span.end_time, span.name))
            return
        start, end = span.start_time, span.end_time
        self._ended[span.context.span_id] = end
        phases = self._phases.pop(span.context.span_id, [])
        # phases LiveKit's own spans stood for (not sent again): their seconds are on the handoff
        sent = {name for _, _, name in phases}
        stood_for = [
            spec
            for spec in sc.PHASE_REGISTRY
            if spec.framework_span and spec.span not in sent and attributes.get(spec.duration_attribute)
        ]
        if not phases and not stood_for:
            return
        gaps, reach = 0, start
        for phase_start, phase_end, name in sorted(phases):
            if phase_end > end:
                self.violations.append(f"{sc.SPAN_HANDOFF}: a phase ends after it")
            nested = sc.PHASES_BY_SPAN.get(name)
            if stood_for and nested is not None and nested.role == sc.ROLE_NESTED:
                continue  # inside a phase counted from its seconds
            gaps += max(0, min(phase_start, end) - reach)
            reach = max(reach, phase_end)
        gaps += max(0, end - reach)
        gaps -= round(sum(attributes[spec.duration_attribute] for spec in stood_for) * 1e9)
        reported = attributes.get(sc.UNATTRIBUTED_DURATION)
        self.handoffs_accounted += 1
        # phases' own clocks meet to within microseconds (a lock wait and the phase it precedes)
        slack = 100_000
        if reported is None:
            if gaps >= 1_000_000 + slack:
                self.violations.append(f"{sc.SPAN_HANDOFF}: {gaps / 1e6:.3f} ms in no phase, none reported")
        elif reported < 0.001 or abs(reported * 1e9 - gaps) > slack:
            self.violations.append(f"{sc.SPAN_HANDOFF}: {gaps / 1e6:.3f} ms in no phase, {reported} s said")


# --- what the app sees of warnings -----------------------------------------------------------------
Warning = tuple[str, str, str, int]  # (category, message, filename, line)


@contextlib.contextmanager
def recorded_warnings() -> Iterator[list[Warning]]:
    """Every warning raised inside, nothing filtered, as (category, message, filename, line).

    The test's own task only: catching warnings changes global state, which is fine here.
    """
    found: list[Warning] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found += [(w.category.__name__, str(w.message), w.filename, w.lineno) for w in caught]


# --- an app that configures export and exits ----------------------------------------------------
EXIT_APP = """
import logging, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
import otel_handoff
otel_handoff.configure(instrument=False)
from opentelemetry import trace
for _ in range(3):
    trace.get_tracer("exit-app").start_span("work").end()
print("done")
if "EXITING" in globals():
    EXITING.append(1)
"""


# Prefixed to an app: once its last line has run (``EXITING.append(1)``), every wait the main
# thread makes from otel_handoff's code (an Event's, a Condition's, a join, a sleep) prints its
# timeout, one line each: the exit's deadline logic, read without a clock.
RECORD_EXIT_WAITS = """
import os, sys, threading, time
EXITING = []
_OURS = os.path.dirname(__import__("importlib.util").util.find_spec("otel_handoff").origin)
_inside = threading.local()  # depth of this thread's waits


def _ours():
    # our caller's function name, when otel_handoff's code is on the stack
    frame = sys._getframe(2)
    via = "wait"
    while frame is not None and frame.f_code.co_filename == threading.__file__:
        via, frame = frame.f_code.co_name, frame.f_back  # Thread.start's own wait says "start"
    caller = frame.f_code.co_name if frame is not None else None
    while frame is not None:
        if frame.f_code.co_filename.startswith(_OURS):
            return f"{caller}:{via}"
        frame = frame.f_back
    return None


def _recording(original, name, timeout_at):
    def wait(*args, **kwargs):
        timeout = kwargs.get("timeout", args[timeout_at] if len(args) > timeout_at else None)
        depth = getattr(_inside, "depth", 0)
        counted = EXITING and not depth and threading.current_thread() is threading.main_thread()
        caller = counted and _ours()
        if caller:
            sys.stderr.write(f"exit-wait: {caller} {timeout!r}\\n")
            sys.stderr.flush()
        _inside.depth = depth + 1  # a wait_for's own waits are within its timeout
        try:
            return original(*args, **kwargs)
        finally:
            _inside.depth = depth
    return wait


threading.Condition.wait = _recording(threading.Condition.wait, "Condition.wait", 1)
threading.Condition.wait_for = _recording(threading.Condition.wait_for, "Condition.wait_for", 2)
threading.Thread.join = _recording(threading.Thread.join, "Thread.join", 1)
time.sleep = _recording(time.sleep, "sleep", 0)
"""


def exit_waits(stderr: str) -> list[tuple[str, float | None]]:
    """(where, timeout) of each wait :data:`RECORD_EXIT_WAITS` printed (None: a wait without one)."""
    waits: list[tuple[str, float | None]] = []
    for line in stderr.splitlines():
        if line.startswith("exit-wait: "):
            _, where, value = line.split(" ")
            waits.append((where, None if value == "None" else float(value)))
    return waits


# what the exit may wait on a receiver, as docs/export.md says: EXIT_TIMEOUT_SECONDS for the
# providers' shutdown, then half a second for the exporters' own
EXIT_WAIT_BOUND_SECONDS = 1.5


def assert_exit_bounded(stderr: str) -> None:
    """Every wait of the exit has a timeout, and together they stay within the documented bound;
    no thread is started at exit (its start would wait, without a timeout: CPython 3.12 refuses it)."""
    waits = exit_waits(stderr)
    assert waits, "no wait of the exit was seen: " + stderr[-2000:]
    assert not [where for where, _ in waits if where.endswith(":start")], waits
    assert all(t is not None for _, t in waits), waits
    assert sum(t or 0.0 for _, t in waits) <= EXIT_WAIT_BOUND_SECONDS + 1e-6, waits


def run_exit_app(**settings: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """(seconds to run, result) of a three-span app using ``configure()``, with ``settings`` as OTEL_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env |= {"OTEL_METRICS_EXPORTER": "none", **settings}
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", RECORD_EXIT_WAITS + EXIT_APP],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return time.monotonic() - start, result
