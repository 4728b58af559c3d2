"""Strands Agents swarm handoffs, traced on the real Strands offline: only the model is scripted
(``otel_handoff.cli.offline.strands``). Strands' own tracing is on, as an app turns it on: its
tracer uses the global provider, set here to the test provider. strands-agents holds opentelemetry
below the suite's, so this module runs in an environment of its own (``tests/test_environments.py``
makes it and runs it there).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest

pytest.importorskip(
    "strands.multiagent", reason="strands-agents runs in its own environment (test_environments)"
)

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from strands import tool
from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry

try:
    from strands.hooks import BeforeNodeCallEvent
except ImportError:  # up to 1.2x the multi-agent hook events were experimental
    from strands.experimental.hooks.multiagent import BeforeNodeCallEvent
from support import Spans

from otel_handoff.cli.offline import strands as st
from otel_handoff.core import schema as sc
from otel_handoff.strands import StrandsHandoffInstrumentor, swarm_interrupts

PHASES = [sc.SPAN_HANDLER, sc.SPAN_DRAIN, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT]
needs_end_turn = pytest.mark.skipif(
    st.AfterToolsEvent is None, reason="this strands-agents has no AfterToolsEvent"
)
needs_interrupts = pytest.mark.skipif(
    not swarm_interrupts(), reason="swarm nodes interrupt and resume from strands-agents 1.20 on"
)


@pytest.fixture(scope="module", autouse=True)
def strands_tracing_on(provider: TracerProvider) -> None:
    """Strands' own spans on the test provider: its tracer is a proxy onto the global provider."""
    trace.set_tracer_provider(provider)


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(StrandsHandoffInstrumentor)
    return spans


def seconds(span: ReadableSpan) -> float:
    return (span.end_time - span.start_time) / 1e9


def strands_span(spans: Spans, name: str) -> ReadableSpan:
    found = [
        s
        for s in spans.all()
        if s.name == name and not s.instrumentation_scope.name.startswith("otel_handoff")
    ]
    assert len(found) == 1, [s.name for s in spans.all()]
    return found[0]


def phase_names(spans: Spans, handoff: ReadableSpan) -> list[str]:
    return [child.name for child in spans.children(handoff)]


def assert_back_to_back(spans: Spans, handoff: ReadableSpan) -> None:
    children = spans.children(handoff)
    for earlier, later in itertools.pairwise(children):
        assert earlier.end_time <= later.start_time, (earlier.name, later.name)
    assert handoff.start_time <= children[0].start_time
    assert children[-1].end_time <= handoff.end_time


def strands_version() -> str:
    from importlib.metadata import version

    return version("strands-agents")


async def test_a_handoff_with_the_drain_is_one_span_under_invoke_swarm(traced: Spans) -> None:
    events = await st.stream(st.swarm(latency=0.03, billing_latency=0.06))
    assert events[-1]["result"].status.value == "completed"
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_STRANDS
    assert attributes[sc.FRAMEWORK_VERSION] == strands_version()
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.GEN_AI_TOOL_NAME] == "handoff_to_agent"
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert attributes[sc.SEQUENCE] == 1
    assert attributes[sc.DRAIN_MODEL_CALLS] == 1
    assert sc.GEN_AI_CONVERSATION_ID not in attributes  # no session manager: no conversation id
    assert handoff.status.status_code is StatusCode.UNSET
    assert handoff.parent.span_id == strands_span(traced, "invoke_swarm").context.span_id
    # the id joins ours to Strands' own tool span
    tool_span = strands_span(traced, "execute_tool handoff_to_agent")
    assert attributes[sc.GEN_AI_TOOL_CALL_ID] == tool_span.attributes[sc.GEN_AI_TOOL_CALL_ID]
    assert handoff.start_time <= tool_span.start_time
    assert phase_names(traced, handoff) == PHASES
    assert_back_to_back(traced, handoff)
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    # the drain is triage's closing reply (30 ms); billing's model (60 ms) is the first output's wait
    assert attributes[sc.DRAIN_DURATION] >= 0.03
    assert attributes[sc.FIRST_OUTPUT_DURATION] >= 0.06
    assert attributes[sc.SETUP_DURATION] < 0.03
    chats = [s for s in traced.all() if s.name == "chat"]
    assert len(chats) == 3  # triage twice (the drain's call is one), billing once


@needs_end_turn
async def test_the_apps_hook_ending_the_turn_leaves_no_drain(traced: Spans) -> None:
    swarm = st.swarm(latency=0.03, billing_latency=0.03, end_turn=True)
    await st.stream(swarm)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.DRAIN_MODEL_CALLS] == 0
    assert handoff.attributes[sc.DRAIN_DURATION] < 0.02
    assert swarm.nodes["triage"].executor.model.calls == 1
    assert phase_names(traced, handoff) == PHASES


async def test_sync_async_and_streamed_runs_alike(traced: Spans) -> None:
    result = st.swarm(latency=0.01, billing_latency=0.01)(st.TASK)
    assert result.status.value == "completed"
    result = await st.swarm(latency=0.01, billing_latency=0.01).invoke_async(st.TASK)
    assert result.status.value == "completed"
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01))
    handoffs = traced.handoffs()
    assert [h.attributes[sc.OUTCOME] for h in handoffs] == [sc.OUTCOME_COMPLETED] * 3
    assert all(phase_names(traced, h) == PHASES for h in handoffs)
    swarms = [s for s in traced.all() if s.name == "invoke_swarm"]
    assert sorted(h.parent.span_id for h in handoffs) == sorted(s.context.span_id for s in swarms)


async def test_the_session_id_is_the_conversation_id_and_counts_on_across_runs(traced: Spans) -> None:
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01, session_id="conv-42"))
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01, session_id="conv-42"))
    handoffs = traced.handoffs()
    assert [h.attributes[sc.GEN_AI_CONVERSATION_ID] for h in handoffs] == ["conv-42", "conv-42"]
    assert [h.attributes[sc.SEQUENCE] for h in handoffs] == [1, 2]


async def test_an_unknown_agent_is_rejected_and_the_old_agent_answers(traced: Spans) -> None:
    events = await st.stream(st.swarm([{"handoff": "refunds"}, {"text": "I will answer myself."}]))
    result = events[-1]["result"]
    assert [n.node_id for n in result.node_history] == ["triage"]
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_UNKNOWN_AGENT
    assert sc.TO_AGENT_NAME not in handoff.attributes  # the model's made-up name is not recorded
    assert handoff.status.status_code is StatusCode.ERROR
    assert phase_names(traced, handoff) == [sc.SPAN_HANDLER]


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"max_handoffs": 1}, sc.REJECTED_MAX_HANDOFFS),
        ({"max_iterations": 1}, sc.REJECTED_MAX_ITERATIONS),
        (
            {"repetitive_handoff_detection_window": 1, "repetitive_handoff_min_unique_agents": 2},
            sc.REJECTED_REPETITIVE_HANDOFF,
        ),
    ],
)
async def test_a_switch_the_swarm_stops_before_is_rejected_with_its_reason(
    traced: Spans, options: dict[str, Any], reason: str
) -> None:
    events = await st.stream(st.swarm(latency=0.01, **options))
    assert events[-1]["result"].status.value == "failed"
    assert not any(e.get("type") == "multiagent_node_start" and e.get("node_id") == "billing" for e in events)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == reason
    assert handoff.attributes[sc.TO_AGENT_NAME] == "billing"
    assert phase_names(traced, handoff) == [sc.SPAN_HANDLER, sc.SPAN_DRAIN, sc.SPAN_SETUP]


class CancelBilling(HookProvider):
    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeNodeCallEvent, self.cancel)

    @staticmethod
    def cancel(event: Any) -> None:
        if event.node_id == "billing":
            event.cancel_node = "not today"


@pytest.mark.skipif(
    "cancel_node" not in getattr(BeforeNodeCallEvent, "__dataclass_fields__", {}),
    reason="this strands-agents has no cancel_node",
)
async def test_a_cancelled_target_node_is_rejected(traced: Spans) -> None:
    events = await st.stream(st.swarm(latency=0.01, hooks=[CancelBilling()]))
    assert events[-1]["result"].status.value == "failed"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_NODE_CANCELLED


async def test_the_old_node_raising_in_its_drain_is_an_error(traced: Spans, caplog: Any) -> None:
    caplog.set_level(logging.CRITICAL, logger="strands")
    events = await st.stream(st.swarm([{"handoff": "billing"}, {"raise": RuntimeError("model down")}]))
    assert events[-1]["result"].status.value == "failed"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    error = events[-1]["result"].results["triage"].result
    assert handoff.attributes[sc.ERROR_TYPE] == type(error).__qualname__
    assert "model down" not in str(handoff.status.description)
    assert phase_names(traced, handoff) == [sc.SPAN_HANDLER, sc.SPAN_DRAIN]


async def test_the_target_raising_is_an_error(traced: Spans, caplog: Any) -> None:
    caplog.set_level(logging.CRITICAL, logger="strands")
    events = await st.stream(st.swarm(billing=[{"raise": ValueError("nope")}], latency=0.01))
    assert events[-1]["result"].status.value == "failed"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert (
        handoff.attributes[sc.ERROR_TYPE] == type(events[-1]["result"].results["billing"].result).__qualname__
    )
    assert phase_names(traced, handoff) == PHASES


async def test_two_handoff_calls_in_one_turn_are_one_span_the_other_counted(traced: Spans) -> None:
    await st.stream(st.swarm([{"handoffs": ["billing", "billing"]}, {"text": "ok"}], latency=0.01))
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.SUPERSEDED_COUNT] == 1
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED


async def test_a_handoff_back_in_the_new_agents_first_call_is_seen(traced: Spans) -> None:
    swarm = st.swarm(
        [{"handoff": "billing"}, {"text": "ok"}, {"text": "back with triage"}],
        [{"handoff": "triage"}, {"text": "returning you"}],
        latency=0.01,
        billing_latency=0.01,
    )
    await st.stream(swarm)
    handoffs = traced.handoffs()
    assert [(h.attributes[sc.FROM_AGENT_NAME], h.attributes[sc.TO_AGENT_NAME]) for h in handoffs] == [
        ("triage", "billing"),
        ("billing", "triage"),
    ]
    assert [h.attributes[sc.OUTCOME] for h in handoffs] == [sc.OUTCOME_COMPLETED] * 2
    assert [h.attributes[sc.SEQUENCE] for h in handoffs] == [1, 2]


async def test_under_the_apps_span_without_strands_tracing_and_a_root_without_either(
    instrument: Any, spans: Spans, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strands' tracing off (its tracer on a no-op provider), ours on the app's provider."""
    from strands.telemetry import tracer as strands_tracer

    instrument(StrandsHandoffInstrumentor)
    monkeypatch.setattr(trace, "get_tracer_provider", trace.NoOpTracerProvider)
    monkeypatch.setattr(strands_tracer, "_tracer_instance", None)
    app = provider.get_tracer("app")
    with app.start_as_current_span("app request") as request:
        await st.stream(st.swarm(latency=0.01, billing_latency=0.01))
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01))
    under_app, root = spans.handoffs()
    assert not [s for s in spans.all() if s.name == "invoke_swarm"]
    assert under_app.parent.span_id == request.get_span_context().span_id
    assert root.parent is None
    assert phase_names(spans, root) == PHASES


async def test_concurrent_swarms_keep_their_own(traced: Spans) -> None:
    swarms = [st.swarm(latency=0.02, billing_latency=0.02 * (i + 1), session_id=f"c-{i}") for i in range(3)]
    await asyncio.gather(*(st.stream(s) for s in swarms))
    handoffs = traced.handoffs()
    assert sorted(h.attributes[sc.GEN_AI_CONVERSATION_ID] for h in handoffs) == ["c-0", "c-1", "c-2"]
    by_trace = {s.context.span_id: s for s in traced.all() if s.name == "invoke_swarm"}
    for handoff in handoffs:
        assert handoff.parent.span_id in by_trace
        assert [
            h.attributes[sc.SEQUENCE] for h in handoffs if h.parent.span_id == handoff.parent.span_id
        ] == [1]


def _observed(swarm: Any, events: list[dict[str, Any]]) -> dict[str, Any]:
    """What the app sees of a run: its events (types and nodes, text and tool ids), the result."""

    def shape(event: dict[str, Any]) -> Any:
        inner = event.get("event", {})
        chunk = inner.get("event", {})
        message = inner.get("message") or {}
        return (
            event.get("type"),
            event.get("node_id"),
            inner.get("data"),
            sorted(chunk) if "metadata" in chunk else str(chunk),  # its timings differ run to run
            (message.get("role"), str(message.get("content"))),
        )

    result = events[-1]["result"]
    return {
        "events": [shape(e) for e in events],
        "status": result.status,
        "history": [n.node_id for n in result.node_history],
        "messages": {
            name: [(m["role"], m["content"]) for m in node.executor.messages]
            for name, node in swarm.nodes.items()
        },
        "shared": swarm.shared_context.context,
        "hooks": _hooks(swarm.hooks),
        "agent_hooks": {name: _hooks(node.executor.hooks) for name, node in swarm.nodes.items()},
    }


def _hooks(registry: Any) -> dict[str, list[str]]:
    """Every callback of a hook registry, by event type (we add none)."""
    return {
        event.__name__: [getattr(c, "__qualname__", type(c).__qualname__) for c in callbacks]
        for event, callbacks in registry._registered_callbacks.items()
    }


async def test_the_app_sees_the_same_events_result_history_and_hooks(instrument: Any, spans: Spans) -> None:
    def strands_spans() -> list[tuple[str, Any]]:
        found = [s for s in spans.all() if not s.instrumentation_scope.name.startswith("otel_handoff")]
        names = {s.context.span_id: s.name for s in found}
        return sorted((s.name, names.get(s.parent.span_id) if s.parent else None) for s in found)

    plain_swarm = st.swarm(latency=0.01, billing_latency=0.01)
    plain = _observed(plain_swarm, await st.stream(plain_swarm))
    plain_spans = strands_spans()
    from conftest import EXPORTER

    EXPORTER.clear()
    instrumentor = instrument(StrandsHandoffInstrumentor)
    traced_swarm = st.swarm(latency=0.01, billing_latency=0.01)
    before = otel_context.get_current()
    traced = _observed(traced_swarm, await st.stream(traced_swarm))
    assert otel_context.get_current() == before
    assert traced == plain
    assert strands_spans() == plain_spans
    assert len(spans.handoffs()) == 1
    instrumentor.uninstrument()
    assert not hasattr(BeforeNodeCallEvent.__init__, "__wrapped__")


async def test_the_app_closing_the_stream_early_closes_the_swarms_and_ends_ours(traced: Spans) -> None:
    swarm = st.swarm(latency=0.01, billing_latency=0.05)
    stream = swarm.stream_async(st.TASK)
    async for event in stream:
        if event.get("type") == "multiagent_handoff":
            break
    await stream.aclose()
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == sc.ERROR_CANCELLED


async def test_cancelling_the_run_passes_the_cancellation_on(traced: Spans) -> None:
    task = asyncio.ensure_future(st.stream(st.swarm(latency=0.01, billing_latency=1.0)))
    await asyncio.sleep(0.15)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR


async def test_no_text_of_the_conversation_in_our_spans(traced: Spans) -> None:
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01, session_id="conv-p"))
    texts = ["over to you", "ticket", st.TASK, "Billing will help you", "invoice", "Context"]
    for span in traced.all():
        if span.instrumentation_scope.name.startswith("otel_handoff"):
            for value in span.attributes.values():
                assert not any(t in str(value) for t in texts), (span.name, value)


def test_uninstrument_restores_every_wrap_point(instrument: Any) -> None:
    from strands.event_loop import streaming

    from otel_handoff.strands import _event_modules
    from otel_handoff.strands._handoffs import event_classes

    classes = event_classes(_event_modules())
    assert len(classes) == 6

    def current() -> list[Any]:
        found = [vars(cls)["__init__"] for cls in classes.values()]
        return [*found, streaming.handle_content_block_start, streaming.handle_message_start]

    originals = current()
    instrumentor = instrument(StrandsHandoffInstrumentor)
    assert all(now is not before for now, before in zip(current(), originals, strict=True))
    instrumentor.uninstrument()
    assert all(now is before for now, before in zip(current(), originals, strict=True))


def test_a_release_without_the_switch_after_the_turn_is_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    import otel_handoff.strands as ours

    monkeypatch.setattr(ours, "shape_problems", lambda: ["SwarmState.handoff_node"])
    instrumentor = StrandsHandoffInstrumentor()
    with caplog.at_level(logging.ERROR):
        instrumentor.instrument()
    try:
        assert not hasattr(BeforeNodeCallEvent.__init__, "__wrapped__")
        assert "lacks SwarmState.handoff_node" in caplog.text
    finally:
        instrumentor.uninstrument()


def test_instrument_warns_nothing(instrument: Any) -> None:
    """No import of ours warns (strands' deprecated experimental hook module, say)."""
    import sys
    import warnings

    sys.modules.pop("strands.experimental.hooks.multiagent", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        instrument(StrandsHandoffInstrumentor)
    assert [str(w.message) for w in caught] == []


def test_the_installed_release_has_everything() -> None:
    from otel_handoff.strands import shape_problems

    assert shape_problems() == []


async def test_the_old_node_timing_out_in_its_drain_is_an_error(traced: Spans, caplog: Any) -> None:
    caplog.set_level(logging.CRITICAL, logger="strands")
    closing_reply = {"text": "Billing will help you.", "latency": 3.0}  # past the node's timeout
    events = await st.stream(
        st.swarm([{"handoff": "billing"}, closing_reply], latency=0.01, node_timeout=1.0)
    )
    assert events[-1]["result"].status.value == "failed"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == sc.ERROR_TIMEOUT
    assert phase_names(traced, handoff) == [sc.SPAN_HANDLER, sc.SPAN_DRAIN]


# --- human-in-the-loop interrupts: the swarm returns INTERRUPTED, the app resumes it with answers ----


class AskFirst(HookProvider):
    """The app's human in the loop: an interrupt before the tool ``tool`` runs, or before the node
    ``node`` does; resumed with an answer, it goes on."""

    def __init__(self, tool: str | None = None, node: str | None = None) -> None:
        self.tool, self.node = tool, node

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        if self.tool:
            registry.add_callback(BeforeToolCallEvent, self.before_tool)
        if self.node:
            registry.add_callback(BeforeNodeCallEvent, self.before_node)

    def before_tool(self, event: Any) -> None:
        if event.tool_use["name"] == self.tool:
            event.interrupt("approve-tool", reason="go ahead?")

    def before_node(self, event: Any) -> None:
        if event.node_id == self.node:
            event.interrupt("approve-node", reason="go ahead?")


@tool
def confirm() -> str:
    """Confirm the caller's request."""
    return "confirmed"


def interrupted_swarm(where: str, **options: Any) -> Any:
    """triage hands off to billing, interrupted: before the handoff tool runs ("tool"), after it ran
    in triage's turn (another tool of the turn asks, "drain"), or before billing's node runs ("node")."""
    if where == "tool":
        return st.swarm(
            latency=0.01,
            billing_latency=0.01,
            triage_options={"hooks": [AskFirst(tool="handoff_to_agent")]},
            **options,
        )
    if where == "drain":
        from strands.tools.executors import SequentialToolExecutor

        return st.swarm(
            [{"handoff": "billing", "tools": ["confirm"]}, {"text": "Billing will help you."}],
            latency=0.01,
            billing_latency=0.01,
            triage_options={
                "tools": [confirm],
                "hooks": [AskFirst(tool="confirm")],
                "tool_executor": SequentialToolExecutor(),  # the handoff tool first, then confirm
            },
            **options,
        )
    return st.swarm(latency=0.01, billing_latency=0.01, hooks=[AskFirst(node="billing")], **options)


# what the resumed run's span holds: the phases before the interrupt ran in the interrupted run
RESUMED_PHASES = {
    "tool": (PHASES, 1),
    "drain": (PHASES[1:], 1),  # the closing reply, in the resumed run
    "node": (PHASES[2:], 0),
}


def answers(result: Any) -> list[dict[str, Any]]:
    return [{"interruptResponse": {"interruptId": i.id, "response": "yes"}} for i in result.interrupts]


def assert_nothing_of_ours_kept() -> None:
    telemetry = StrandsHandoffInstrumentor._telemetry
    kept = (telemetry.runs, telemetry.starting, telemetry.agents, telemetry.tool_starts, telemetry.awaiting)
    assert kept == ({}, {}, {}, {}, 0)


@needs_interrupts
@pytest.mark.parametrize("where", list(RESUMED_PHASES))
async def test_an_interrupted_handoff_is_one_span_in_the_run_that_resumes_it(
    traced: Spans, where: str
) -> None:
    swarm = interrupted_swarm(where)
    interrupted = (await st.stream(swarm))[-1]["result"]
    assert interrupted.status.value == "interrupted"
    assert traced.handoffs() == []  # nothing open, nothing half-recorded in the interrupted run
    assert_nothing_of_ours_kept()
    resumed = (await st.stream(swarm, answers(interrupted)))[-1]["result"]
    assert resumed.status.value == "completed"
    assert [n.node_id for n in resumed.node_history] == ["triage", "billing"]
    [handoff] = traced.handoffs()
    _, resumed_run = traced.named("invoke_swarm")
    assert handoff.parent.span_id == resumed_run.context.span_id
    assert handoff.start_time >= resumed_run.start_time  # not the human's wait
    attributes = handoff.attributes
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.INTERRUPTED] is True
    assert attributes[sc.SEQUENCE] == 1
    phases, drain_model_calls = RESUMED_PHASES[where]
    assert phase_names(traced, handoff) == phases
    assert_back_to_back(traced, handoff)
    assert traced.children(handoff)[0].start_time == handoff.start_time  # the phases account for it
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    assert attributes[sc.DRAIN_MODEL_CALLS] == drain_model_calls
    # the id joins Strands' span of the handoff tool: the resumed run's, or the interrupted run's
    tool_calls = {s.attributes[sc.GEN_AI_TOOL_CALL_ID] for s in traced.named("execute_tool handoff_to_agent")}
    assert tool_calls == {attributes[sc.GEN_AI_TOOL_CALL_ID]}
    assert_nothing_of_ours_kept()


@needs_interrupts
async def test_an_interrupt_in_the_new_agents_turn_comes_after_the_handoff_completed(traced: Spans) -> None:
    """Within its turn the new agent can be interrupted only once its model answered (its tools):
    the handoff completed in the interrupted run, and the resumed run makes none."""
    from strands.multiagent import Swarm

    nodes = [
        st.agent("triage", [{"handoff": "billing"}, {"text": "Billing will help you."}], 0.01),
        st.agent(
            "billing",
            [{"tools": ["confirm"]}, {"text": "Your last invoice was paid in full."}],
            0.01,
            [AskFirst(tool="confirm")],
            tools=[confirm],
        ),
    ]
    swarm = Swarm(nodes, entry_point=nodes[0])
    interrupted = (await st.stream(swarm))[-1]["result"]
    assert interrupted.status.value == "interrupted"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert sc.INTERRUPTED not in handoff.attributes
    assert phase_names(traced, handoff) == PHASES
    resumed = (await st.stream(swarm, answers(interrupted)))[-1]["result"]
    assert resumed.status.value == "completed"
    assert traced.handoffs() == [handoff]
    assert_nothing_of_ours_kept()


@needs_interrupts
@pytest.mark.parametrize("where", list(RESUMED_PHASES))
async def test_an_interrupted_run_never_resumed_leaves_nothing_of_ours(traced: Spans, where: str) -> None:
    import gc

    swarm = interrupted_swarm(where)
    before = otel_context.get_current()
    assert (await st.stream(swarm))[-1]["result"].status.value == "interrupted"
    assert otel_context.get_current() == before
    assert_nothing_of_ours_kept()
    del swarm
    gc.collect()
    assert [s for s in traced.all() if s.instrumentation_scope.name.startswith("otel_handoff")] == []


@needs_interrupts
async def test_a_resumed_handoff_keeps_its_place_in_the_sessions_count(traced: Spans) -> None:
    swarm = interrupted_swarm("drain", session_id="conv-i")
    interrupted = (await st.stream(swarm))[-1]["result"]
    await st.stream(swarm, answers(interrupted))
    await st.stream(st.swarm(latency=0.01, billing_latency=0.01, session_id="conv-i"))
    handoffs = traced.handoffs()
    assert [h.attributes[sc.SEQUENCE] for h in handoffs] == [1, 2]
    assert [h.attributes.get(sc.INTERRUPTED) for h in handoffs] == [True, None]


@needs_interrupts
@pytest.mark.parametrize("where", ["drain", "node"])
async def test_a_swarm_restored_from_its_session_resumes_the_handoff(traced: Spans, where: str) -> None:
    """The app's process ended at the interrupt; a new one restores the swarm and resumes it."""
    import tempfile

    from strands.session.file_session_manager import FileSessionManager

    storage = tempfile.mkdtemp()

    def session() -> Any:
        return FileSessionManager(session_id="conv-r", storage_dir=storage)

    interrupted = (await st.stream(interrupted_swarm(where, session_manager=session())))[-1]["result"]
    restored = interrupted_swarm(where, session_manager=session())
    if where == "drain":  # its first reply, the handoff, was the interrupted run's
        restored.nodes["triage"].executor.model.script = [{"text": "Billing will help you."}]
    assert (await st.stream(restored, answers(interrupted)))[-1]["result"].status.value == "completed"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.INTERRUPTED] is True
    assert handoff.attributes[sc.GEN_AI_CONVERSATION_ID] == "conv-r"
    assert phase_names(traced, handoff) == RESUMED_PHASES[where][0]
    assert traced.children(handoff)[0].start_time == handoff.start_time
    [tool_span] = traced.named("execute_tool handoff_to_agent")
    if where == "drain":  # read from triage's messages, restored with the interrupt
        assert handoff.attributes[sc.GEN_AI_TOOL_CALL_ID] == tool_span.attributes[sc.GEN_AI_TOOL_CALL_ID]
    else:  # triage's messages are not restored: the call is in no message of this process
        assert sc.GEN_AI_TOOL_CALL_ID not in handoff.attributes


@needs_interrupts
async def test_a_resume_with_answers_to_no_interrupt_raises_as_before_and_keeps_nothing(
    traced: Spans,
) -> None:
    """Strands refuses it after its run's start, before anything can end the run: nothing of ours
    may wait for that end (a run of ours held the swarm for good); only a weak note is left."""
    import gc

    swarm = interrupted_swarm("drain")
    interrupted = (await st.stream(swarm))[-1]["result"]
    wrong = [{"interruptResponse": {"interruptId": "no-such-interrupt", "response": "yes"}}]
    with pytest.raises(KeyError):
        await st.stream(swarm, wrong)
    assert StrandsHandoffInstrumentor._telemetry.runs == {}
    assert not [r for r in gc.get_referrers(swarm) if type(r).__module__.startswith("otel_handoff")]
    await st.stream(swarm, answers(interrupted))  # the right answers still resume it
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.INTERRUPTED] is True
    assert phase_names(traced, handoff) == PHASES[1:]
    assert_nothing_of_ours_kept()
