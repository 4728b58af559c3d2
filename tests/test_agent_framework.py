"""Microsoft Agent Framework ``HandoffBuilder`` handoffs, traced on the real framework offline: only
the chat client is scripted (``otel_handoff.cli.offline.agent_framework``). The framework's own
tracing is on, as an app turns it on: its tracer uses the global provider, set here to the test
provider."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest

pytest.importorskip("agent_framework_orchestrations", reason="agent-framework-orchestrations not installed")

from agent_framework import (
    InMemoryCheckpointStorage,
    WorkflowBuilder,
    WorkflowContext,
    WorkflowRunState,
    executor,
)
from agent_framework import observability as af_observability
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from support import Spans

from otel_handoff.agent_framework import AgentFrameworkHandoffInstrumentor
from otel_handoff.cli.offline import agent_framework as af
from otel_handoff.core import schema as sc

PHASES = [sc.SPAN_HANDLER, sc.SPAN_CONTEXT_UPDATE, sc.SPAN_DISPATCH, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT]


@pytest.fixture(scope="module", autouse=True)
def framework_tracing_on(provider: TracerProvider) -> Any:
    """The framework's own spans on the test provider (its tracer reads the global provider)."""
    trace.set_tracer_provider(provider)
    af_observability.enable_instrumentation(enable_sensitive_data=False)
    yield


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(AgentFrameworkHandoffInstrumentor)
    return spans


def framework_spans(spans: Spans, name: str) -> list[ReadableSpan]:
    return [s for s in spans.all() if s.name == name and not s.instrumentation_scope.name.startswith("otel")]


def phase_names(spans: Spans, handoff: ReadableSpan) -> list[str]:
    return [child.name for child in spans.children(handoff)]


def assert_back_to_back(spans: Spans, handoff: ReadableSpan) -> None:
    children = spans.children(handoff)
    for earlier, later in itertools.pairwise(children):
        assert earlier.end_time <= later.start_time, (earlier.name, later.name)
    assert handoff.start_time <= children[0].start_time
    assert children[-1].end_time <= handoff.end_time


def core_version() -> str:
    from importlib.metadata import version

    return version("agent-framework-core")


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "run"])
async def test_a_handoff_is_one_span_under_workflow_run(traced: Spans, streamed: bool) -> None:
    workflow, agents = af.support(latency=0.05)
    if streamed:
        events = await af.stream(workflow)
    else:
        events = list(await workflow.run(af.TASK))
    assert af.handoffs_sent(events) == [("triage", "billing")]
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_AGENT_FRAMEWORK
    assert attributes[sc.FRAMEWORK_VERSION] == core_version()
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.GEN_AI_TOOL_NAME] == "handoff_to_billing"
    assert attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-handoff-1"
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert attributes[sc.SEQUENCE] == 1
    assert sc.GEN_AI_CONVERSATION_ID not in attributes  # no adapter set one
    assert sc.CHECKPOINT_WRITES not in attributes
    assert handoff.status.status_code is StatusCode.UNSET
    [run] = framework_spans(traced, "workflow.run")
    assert handoff.parent.span_id == run.context.span_id
    assert phase_names(traced, handoff) == PHASES
    assert_back_to_back(traced, handoff)
    # billing's model call (50 ms) is the first output's wait; the framework's own work is small
    assert attributes[sc.FIRST_OUTPUT_DURATION] >= 0.05
    assert attributes[sc.SETUP_DURATION] < 0.05
    # the target's processing span starts after the switch's message.send, inside the dispatch
    [switch] = [
        s
        for s in framework_spans(traced, "message.send")
        if s.attributes.get("message.destination_executor_id") == "billing"
    ]
    [dispatch] = traced.children(handoff, sc.SPAN_DISPATCH)
    assert dispatch.start_time >= switch.end_time
    assert (agents["triage"].client.calls, agents["billing"].client.calls) == (1, 1)
    # it starts where triage's model call returned the handoff call, inside the framework's chat span
    triage_chat = min(
        (s for s in traced.all() if s.name.startswith("chat") and s.start_time < handoff.start_time),
        key=lambda s: s.start_time,
    )
    assert triage_chat.start_time < handoff.start_time <= triage_chat.end_time


async def test_a_checkpoint_written_on_the_way_is_counted(traced: Spans) -> None:
    storage = InMemoryCheckpointStorage()
    workflow, _ = af.support(latency=0.02, checkpoint_storage=storage)
    await af.stream(workflow)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.CHECKPOINT_WRITES] == 1  # the superstep boundary's
    assert phase_names(traced, handoff) == PHASES
    assert await storage.list_checkpoints(workflow_name=workflow.name)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "run"])
async def test_a_run_resumed_from_a_checkpoint_counts_on(traced: Spans, streamed: bool) -> None:
    storage = InMemoryCheckpointStorage()
    workflow, _ = af.support(latency=0.01, checkpoint_storage=storage)
    events = await af.stream(workflow) if streamed else list(await workflow.run(af.TASK))
    [request] = [e for e in events if e.type == "request_info"]
    checkpoints = await storage.list_checkpoints(workflow_name=workflow.name)
    checkpoint = checkpoints[-1].checkpoint_id  # the run's last (it waits for the user there)
    # the app rebuilds its workflow (a new process, say) and answers from the checkpoint
    resumed, agents = af.support(
        triage=[{"text": "triage again"}],
        billing=[{"tool": "handoff_to_triage", "id": "call-back"}],
        latency=0.01,
        checkpoint_storage=storage,
    )
    answer = {request.request_id: [af.Message("user", ["more"])]}
    resumed_events = [e async for e in resumed.run(stream=True, checkpoint_id=checkpoint, responses=answer)]
    assert af.handoffs_sent(resumed_events) == [("billing", "triage")]
    assert agents["triage"].client.calls == 1
    first, second = sorted(traced.handoffs(), key=lambda s: s.start_time)
    assert (first.attributes[sc.SEQUENCE], second.attributes[sc.SEQUENCE]) == (1, 2)
    assert second.attributes[sc.FROM_AGENT_NAME] == "billing"
    assert second.attributes[sc.TO_AGENT_NAME] == "triage"


async def test_the_termination_condition_before_the_target_runs_is_rejected(traced: Spans) -> None:
    checks: list[int] = []

    def ends_after_triage(conversation: list[Any]) -> bool:
        """The app's condition: asked before triage runs (no), then before billing runs (yes)."""
        checks.append(len(conversation))
        return len(checks) > 1

    workflow, agents = af.support(latency=0.01, termination_condition=ends_after_triage)
    events = await af.stream(workflow)
    assert af.handoffs_sent(events) == [("triage", "billing")]
    assert agents["billing"].client.calls == 0
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_TARGET_NOT_RUN
    assert phase_names(traced, handoff) == PHASES[:4]


class BillingDown(RuntimeError):
    pass


async def test_the_target_raising_is_an_error_with_its_type(traced: Spans) -> None:
    workflow, _ = af.support(billing=[{"raise": BillingDown("no")}], latency=0.01)
    with pytest.raises(BillingDown):
        await af.stream(workflow)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.status.status_code is StatusCode.ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == "BillingDown"


def unreachable(metric_reader: Any) -> list[tuple[dict[str, Any], int]]:
    """The ``agent_handoff.unreachable_calls`` points recorded since the last read: (attributes, value)."""
    data = metric_reader.get_metrics_data()  # None: nothing recorded at all
    return [
        (dict(point.attributes), point.value)
        for resource in (data.resource_metrics if data is not None else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == sc.METRIC_UNREACHABLE_CALLS
        for point in metric.data.data_points
        if point.value
    ]


REFUSED = {sc.FRAMEWORK: sc.FRAMEWORK_AGENT_FRAMEWORK, sc.FROM_AGENT_NAME: "triage"}


def refused_handoff(terminate: bool = False, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """triage calls ``handoff_to_refunds``: no agent of the workflow, so no tool triage was given."""
    workflow, agents = af.support(
        triage=[{"tool": "handoff_to_refunds", "id": "call-bad"}, {"text": "I will answer myself."}],
        latency=0.01,
        **kwargs,
    )
    if terminate:  # the app's choice: an unknown call is the run's error
        for made in agents.values():
            made.client.function_invocation_configuration["terminate_on_unknown_calls"] = True
    return workflow, agents


async def run_workflow(workflow: Any, streamed: bool) -> list[Any]:
    return await af.stream(workflow) if streamed else list(await workflow.run(af.TASK))


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "run"])
async def test_a_handoff_tool_the_agent_may_not_call_is_counted_not_traced(
    instrument: Any, spans: Spans, metric_reader: Any, streamed: bool
) -> None:
    workflow, agents = refused_handoff()
    plain = await run_workflow(workflow, streamed)
    instrument(AgentFrameworkHandoffInstrumentor)
    workflow, agents = refused_handoff()
    events = await run_workflow(workflow, streamed)
    assert af.handoffs_sent(events) == []
    assert agents["triage"].client.calls == 2  # "function not found": the model answered again
    assert spans.handoffs() == []
    assert unreachable(metric_reader) == [(REFUSED, 1)]
    assert af.shape(events) == af.shape(plain)  # the app's events and outputs, as without us


@pytest.mark.parametrize("autonomous", [False, True], ids=["one-run", "autonomous"])
async def test_terminate_on_unknown_calls_raises_as_without_us_and_counts_once(
    instrument: Any, spans: Spans, metric_reader: Any, autonomous: bool
) -> None:
    """The app made an unknown call the run's error: the same exception reaches it, and the refused
    handoff call is counted once (autonomous mode: the refusal is in a run nested in triage's)."""
    kwargs: dict[str, Any] = {}
    if autonomous:
        kwargs["configure"] = lambda b: b.with_autonomous_mode(turn_limits={"triage": 3})

    async def observe() -> tuple[type[BaseException], str]:
        workflow, agents = refused_handoff(terminate=True, **kwargs)
        if autonomous:  # triage's first answer is text: it goes on by itself, in a nested run
            agents["triage"].client.script.insert(0, {"text": "thinking"})
        with pytest.raises(KeyError) as raised:
            await af.stream(workflow)
        return type(raised.value), str(raised.value)

    plain = await observe()
    instrument(AgentFrameworkHandoffInstrumentor)
    assert await observe() == plain
    assert spans.handoffs() == []
    assert unreachable(metric_reader) == [(REFUSED, 1)]


async def test_a_handoff_after_a_refused_call_is_traced_and_the_refusal_counted(
    traced: Spans, metric_reader: Any
) -> None:
    workflow, _ = af.support(
        triage=[
            {"tool": "handoff_to_refunds", "id": "call-bad"},
            {"tool": "handoff_to_billing", "id": "call-ok"},
        ],
        latency=0.01,
    )
    events = await af.stream(workflow)
    assert af.handoffs_sent(events) == [("triage", "billing")]
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-ok"
    assert unreachable(metric_reader) == [(REFUSED, 1)]


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "run"])
async def test_a_handoff_leaves_the_unreachable_count_alone(
    traced: Spans, metric_reader: Any, streamed: bool
) -> None:
    workflow, _ = af.support(latency=0.01)
    await run_workflow(workflow, streamed)
    assert len(traced.handoffs()) == 1
    assert unreachable(metric_reader) == []


async def test_an_app_tool_named_like_a_handoff_is_not_counted(traced: Spans, metric_reader: Any) -> None:
    """Found and run, it was refused by nobody: only the framework's "not found" answer counts."""
    from agent_framework import tool

    @tool(name="handoff_to_human", approval_mode="never_require")
    def handoff_to_human() -> str:
        return "queued"

    triage = af.agent(
        "triage",
        [{"tool": "handoff_to_human", "id": "call-app"}, {"text": "A human will call you."}],
        0.01,
        tools=[handoff_to_human],
    )
    billing = af.agent("billing", [], 0.01)
    builder = af.HandoffBuilder(name="support", participants=[triage, billing])
    workflow = builder.with_start_agent(triage).build()
    events = await af.stream(workflow)
    assert af.handoffs_sent(events) == []
    assert triage.client.calls == 2
    assert unreachable(metric_reader) == []


async def test_several_handoff_calls_in_one_response_are_one_span(traced: Spans) -> None:
    workflow, _ = af.support(
        triage=[{"tools": [("handoff_to_billing", "call-1"), ("handoff_to_billing", "call-2")]}],
        latency=0.01,
    )
    events = await af.stream(workflow)
    assert af.handoffs_sent(events) == [("triage", "billing")]
    [handoff] = traced.handoffs()
    # the one taken: the call whose result ends the response (the framework's rule); the other counted
    assert handoff.attributes[sc.GEN_AI_TOOL_CALL_ID] in {"call-1", "call-2"}
    assert handoff.attributes[sc.SUPERSEDED_COUNT] == 1
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED


async def test_autonomous_mode_and_a_handoff_back(traced: Spans) -> None:
    workflow, agents = af.support(
        triage=[{"text": "thinking"}, {"tool": "handoff_to_billing", "id": "call-1"}],
        billing=[{"tool": "handoff_to_triage", "id": "call-2"}],
        latency=0.01,
        configure=lambda b: b.with_autonomous_mode(turn_limits={"triage": 3, "billing": 0}),
    )
    events = await af.stream(workflow)
    assert agents["triage"].client.calls >= 2  # autonomous: triage went on by itself, then handed off
    assert af.handoffs_sent(events)[:2] == [("triage", "billing"), ("billing", "triage")]
    first, second = sorted(traced.handoffs(), key=lambda s: s.start_time)[:2]
    assert (first.attributes[sc.TO_AGENT_NAME], second.attributes[sc.TO_AGENT_NAME]) == ("billing", "triage")
    assert (first.attributes[sc.SEQUENCE], second.attributes[sc.SEQUENCE]) == (1, 2)
    assert first.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-1"


async def test_return_to_previous_routes_the_answer_and_traces_the_handoff(traced: Spans) -> None:
    if not hasattr(af.HandoffBuilder, "enable_return_to_previous"):
        pytest.skip("this agent-framework-orchestrations has no enable_return_to_previous (1.3.0 and later)")
    workflow, agents = af.support(
        billing=[{"text": "which invoice?"}, {"text": "done"}],
        latency=0.01,
        configure=lambda b: b.enable_return_to_previous(),
    )
    events = await af.stream(workflow)
    [request] = [e for e in events if e.type == "request_info"]
    answer = {request.request_id: [af.Message("user", ["the May one"])]}
    more = [e async for e in workflow.run(stream=True, responses=answer)]
    assert agents["billing"].client.calls == 2  # the answer went back to billing
    assert af.handoffs_sent(more) == []
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.TO_AGENT_NAME] == "billing"


async def test_without_the_frameworks_tracing_the_handoff_is_under_the_apps_span(traced: Spans) -> None:
    settings = af_observability.OBSERVABILITY_SETTINGS
    enabled = settings.enable_instrumentation
    settings.enable_instrumentation = False
    try:
        tracer = trace.get_tracer("app")
        with tracer.start_as_current_span("app") as app:
            workflow, _ = af.support(latency=0.01)
            await af.stream(workflow)
    finally:
        settings.enable_instrumentation = enabled
    assert framework_spans(traced, "workflow.run") == []
    [handoff] = traced.handoffs()
    assert handoff.parent.span_id == app.get_span_context().span_id


async def test_the_conversation_id_the_framework_puts_on_workflow_run(traced: Spans) -> None:
    use = getattr(af_observability, "_use_telemetry_conversation_id", None)
    if use is None:
        pytest.skip("this agent-framework-core has no telemetry conversation id")
    workflow, _ = af.support(latency=0.01)
    with use("conv-42"):
        await af.stream(workflow)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.GEN_AI_CONVERSATION_ID] == "conv-42"
    [run] = framework_spans(traced, "workflow.run")
    assert run.attributes.get(sc.GEN_AI_CONVERSATION_ID) == "conv-42"


async def test_concurrent_workflows_keep_their_handoffs_apart(traced: Spans) -> None:
    flows = [af.support(latency=0.02)[0] for _ in range(3)]
    await asyncio.gather(*(af.stream(w) for w in flows))
    handoffs = traced.handoffs()
    assert len(handoffs) == 3
    runs = {s.context.span_id for s in framework_spans(traced, "workflow.run")}
    assert {h.parent.span_id for h in handoffs} == runs
    assert all(h.attributes[sc.SEQUENCE] == 1 for h in handoffs)
    assert all(h.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED for h in handoffs)
    # nothing awaited any more: the per-update test is one integer again
    assert AgentFrameworkHandoffInstrumentor._telemetry.awaiting == 0


def _what_the_app_sees(spans: Spans, events: list[Any]) -> tuple[Any, ...]:
    ours = {s.context.span_id for s in spans.all() if s.instrumentation_scope.name.startswith("otel_handoff")}
    by_id = {s.context.span_id: s for s in spans.all()}
    theirs = sorted(
        (s.name, by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id else None)
        for s in spans.all()
        if s.context.span_id not in ours
    )
    return af.shape(events), theirs


async def test_the_app_sees_the_same_events_outputs_checkpoints_and_spans(
    instrument: Any, spans: Spans, span_exporter: Any
) -> None:
    async def observe() -> tuple[Any, ...]:
        storage = InMemoryCheckpointStorage()
        workflow, agents = af.support(latency=0.005, checkpoint_storage=storage)
        middleware = {name: list(a.middleware or []) for name, a in agents.items()}
        providers = {name: list(a.context_providers or []) for name, a in agents.items()}
        events = await af.stream(workflow)
        checkpoints = await storage.list_checkpoints(workflow_name=workflow.name)
        seen = _what_the_app_sees(spans, events)
        return (
            *seen,
            len(checkpoints),
            middleware == {name: list(a.middleware or []) for name, a in agents.items()},
            providers == {name: list(a.context_providers or []) for name, a in agents.items()},
            workflow.status if hasattr(workflow, "status") else None,
        )

    span_exporter.clear()
    plain = await observe()
    span_exporter.clear()
    instrument(AgentFrameworkHandoffInstrumentor)
    traced = await observe()
    assert len(spans.handoffs()) == 1
    assert plain == traced
    assert plain[-1] in (WorkflowRunState.IDLE_WITH_PENDING_REQUESTS, None)


async def test_uninstrument_restores_every_wrap_point(instrument: Any, spans: Spans) -> None:
    from agent_framework import BaseChatClient, Workflow
    from agent_framework._workflows._runner_context import InProcRunnerContext
    from agent_framework._workflows._workflow_context import WorkflowContext
    from agent_framework_orchestrations import _handoff

    def originals() -> list[Any]:
        return [
            Workflow.__dict__["run"],
            InProcRunnerContext.__dict__["create_checkpoint"],
            _handoff._AutoHandoffMiddleware.__dict__["process"],
            _handoff.HandoffAgentExecutor.__dict__["_run_agent_and_emit"],
            _handoff.HandoffAgentExecutor.__dict__["_is_handoff_requested"],
            BaseChatClient.__dict__["get_response"],
            WorkflowContext.__dict__["yield_output"],
        ]

    before = originals()
    instrumentor = instrument(AgentFrameworkHandoffInstrumentor)
    assert all(a is not b for a, b in zip(before, originals(), strict=True))
    instrumentor.uninstrument()
    assert originals() == before
    await af.stream(af.support(latency=0.005)[0])
    assert spans.handoffs() == []


def test_a_release_lacking_a_feature_is_refused_whole(
    instrument: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agent_framework import ResponseStream, Workflow

    monkeypatch.delattr(ResponseStream, "with_cleanup_hook")
    run = Workflow.__dict__["run"]
    with caplog.at_level(logging.ERROR):
        instrument(AgentFrameworkHandoffInstrumentor)
    assert Workflow.__dict__["run"] is run
    [line] = [r.getMessage() for r in caplog.records if "otel-handoff" in r.getMessage()]
    assert "with_cleanup_hook" in line and core_version() in line


async def test_a_workflow_without_handoffs_is_left_alone(traced: Spans) -> None:
    """Not a HandoffBuilder workflow: its run is returned as the framework made it."""

    @executor(id="echo")
    async def echo(text: str, ctx: WorkflowContext[Any, str]) -> None:
        await ctx.yield_output(text)

    workflow = WorkflowBuilder(start_executor=echo).build()
    run = workflow.run("hi")
    assert run.__qualname__ == "ResponseStream.get_final_response"  # the framework's own coroutine
    assert (await run).get_outputs() == ["hi"]
    assert traced.handoffs() == []


async def test_no_handoff_leaves_no_span_and_the_current_context_unchanged(traced: Spans) -> None:
    workflow, _ = af.support(triage=[{"text": "I can answer that."}], latency=0.005)
    before = otel_context.get_current()
    events = await af.stream(workflow)
    assert otel_context.get_current() == before
    assert af.handoffs_sent(events) == []
    assert traced.handoffs() == []
