"""OpenAI Agents SDK handoffs, traced on the real SDK offline: text runs and realtime sessions.

Only the model edges are scripted: the SDK's own ``ScriptedModel`` and ``ScriptedRealtimeModel``,
and a websocket server on 127.0.0.1 for the SDK's real ``OpenAIRealtimeWebSocketModel``
(``otel_handoff.cli.offline.openai_agents``). The SDK's own trace export is replaced (no network).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

pytest.importorskip("agents.testing", reason="needs openai-agents >= 0.21.0 (agents.testing)")

import itertools

from agents import RunConfig, Runner, TracingProcessor, set_trace_processors
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans

from otel_handoff.cli.offline import openai_agents as oa
from otel_handoff.core import schema as sc
from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor, _text

TEXT_PHASES = [sc.SPAN_ON_HANDOFF, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT]
REALTIME_PHASES = [
    sc.SPAN_ON_HANDOFF,
    sc.SPAN_SETTINGS,
    sc.SPAN_SESSION_UPDATE,
    sc.SPAN_RESPONSE_DRAIN,
    sc.SPAN_FIRST_AUDIO,
]


class SdkTraces(TracingProcessor):
    """The SDK's own traces, in place of its exporter to OpenAI."""

    def __init__(self) -> None:
        self.trace_ids: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        self.trace_ids.append(trace.trace_id)

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def sdk_traces() -> SdkTraces:
    recorder = SdkTraces()
    set_trace_processors([recorder])
    return recorder


@pytest.fixture
def traced(instrument: Any, spans: Spans, sdk_traces: SdkTraces) -> Spans:
    instrument(OpenAIAgentsHandoffInstrumentor)
    return spans


def seconds(span: ReadableSpan) -> float:
    return (span.end_time - span.start_time) / 1e9


# asyncio may run a timer up to its clock's resolution early, and our clock is not the loop's
SLACK = 0.005


def lasted(span: ReadableSpan, delay: float) -> bool:
    """Did ``span`` last at least ``delay`` (a sleep in the scenario)?"""
    return seconds(span) >= delay - SLACK


def phases(spans: Spans, handoff: ReadableSpan) -> dict[str, ReadableSpan]:
    return {child.name: child for child in spans.children(handoff)}


def assert_back_to_back(children: list[ReadableSpan]) -> None:
    """Phases that follow each other: none starts before the one before it ended."""
    for before, after in itertools.pairwise(children):
        assert before.end_time <= after.start_time, (before.name, after.name)


# --- text runs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["run", "streamed", "sync"])
async def test_text_handoff(traced: Spans, sdk_traces: SdkTraces, open_spans: OpenSpans, mode: str) -> None:
    scenario = oa.TextScenario(on_handoff_delay=0.03, reply_delay=0.05)
    output, _ = await oa.run_text(scenario, mode)
    assert output == oa.BILLING_REPLY
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_OPENAI_AGENTS
    assert attributes[sc.FRAMEWORK_VERSION]
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert (attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME], attributes[sc.GEN_AI_TOOL_CALL_ID]) == (
        sc.TRIGGER_TOOL,
        "transfer_to_billing",
        "call_billing",
    )
    assert (attributes[sc.OUTCOME], attributes[sc.SEQUENCE]) == (sc.OUTCOME_COMPLETED, 1)
    assert attributes[sc.STREAMED] is (mode == "streamed")
    assert attributes[sc.FRAMEWORK_TRACE_ID] == sdk_traces.trace_ids[-1]
    assert sc.GEN_AI_CONVERSATION_ID not in attributes  # the app gave none: none is made up
    assert handoff.status.status_code is StatusCode.UNSET
    children = traced.children(handoff)
    assert [child.name for child in children] == TEXT_PHASES  # no hooks, no filter: no such spans
    assert_back_to_back(children)
    named = phases(traced, handoff)
    assert lasted(named[sc.SPAN_ON_HANDOFF], 0.03)
    assert lasted(named[sc.SPAN_FIRST_OUTPUT], 0.05)
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    assert handoff.end_time == named[sc.SPAN_FIRST_OUTPUT].end_time
    # nobody traced the run: its handoffs go under one agent_handoff.chat root
    [root] = traced.named(sc.SPAN_CHAT)
    assert handoff.parent.span_id == root.context.span_id and root.parent is None
    assert open_spans.ours() == []


async def test_a_chain_of_two_handoffs(traced: Spans) -> None:
    output, _ = await oa.run_text(oa.TextScenario(chain=True))
    assert output == oa.REFUNDS_REPLY
    first, second = traced.handoffs()
    assert [(h.attributes[sc.FROM_AGENT_NAME], h.attributes[sc.TO_AGENT_NAME]) for h in (first, second)] == [
        ("triage", "billing"),
        ("billing", "refunds"),
    ]
    assert [h.attributes[sc.SEQUENCE] for h in (first, second)] == [1, 2]
    assert first.parent.span_id == second.parent.span_id  # one run, one root
    assert first.end_time <= second.start_time
    [root] = traced.named(sc.SPAN_CHAT)
    assert root.attributes[sc.CHAT_HANDOFFS] == 2


async def test_slow_phases_each_show_in_their_own_child(traced: Spans) -> None:
    scenario = oa.TextScenario(
        on_handoff_delay=0.06, hooks_delay=0.03, input_filter_delay=0.04, reply_delay=0.05
    )
    await oa.run_text(scenario)
    [handoff] = traced.handoffs()
    children = traced.children(handoff)
    assert [c.name for c in children] == [
        sc.SPAN_ON_HANDOFF,
        sc.SPAN_HOOKS,
        sc.SPAN_INPUT_FILTER,
        sc.SPAN_SETUP,
        sc.SPAN_FIRST_OUTPUT,
    ]
    assert_back_to_back(children)
    named = phases(traced, handoff)
    for name, delay in (
        (sc.SPAN_ON_HANDOFF, 0.06),
        (sc.SPAN_HOOKS, 0.03),
        (sc.SPAN_INPUT_FILTER, 0.04),
        (sc.SPAN_FIRST_OUTPUT, 0.05),
    ):
        assert lasted(named[name], delay), name
    # each slow step is in its own phase, not the one before or after it
    assert seconds(named[sc.SPAN_SETUP]) < 0.03
    attributes = handoff.attributes
    assert attributes[sc.ON_HANDOFF_DURATION] == pytest.approx(seconds(named[sc.SPAN_ON_HANDOFF]), abs=1e-6)
    assert attributes[sc.INPUT_FILTER_DURATION] == pytest.approx(
        seconds(named[sc.SPAN_INPUT_FILTER]), abs=1e-6
    )


async def test_setup_with_dynamic_instructions_and_no_mcp(traced: Spans) -> None:
    await oa.run_text(oa.TextScenario(instructions_delay=0.05))
    await oa.run_text(oa.TextScenario())
    slow, plain = (phases(traced, h)[sc.SPAN_SETUP] for h in traced.named(sc.SPAN_HANDOFF))
    assert lasted(slow, 0.05)  # the new agent's instructions are built in its setup
    assert seconds(plain) < 0.05  # tools and handoffs without MCP servers: no wait


async def test_several_handoffs_in_one_response(traced: Spans) -> None:
    output, _ = await oa.run_text(oa.TextScenario(several=True))
    assert output == oa.BILLING_REPLY  # the SDK runs the first one
    ran, rejected = traced.handoffs()
    assert (ran.attributes[sc.TO_AGENT_NAME], ran.attributes[sc.OUTCOME]) == ("billing", sc.OUTCOME_COMPLETED)
    assert rejected.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert rejected.attributes[sc.REJECTION_REASON] == sc.REJECTED_MULTIPLE
    assert (rejected.attributes[sc.TO_AGENT_NAME], rejected.attributes[sc.GEN_AI_TOOL_CALL_ID]) == (
        "refunds",
        "call_refunds_too",
    )
    assert traced.children(rejected) == []


async def outcome_of(scenario: oa.TextScenario) -> tuple[type[BaseException], tuple[Any, ...]]:
    with pytest.raises(Exception) as raised:
        await oa.run_text(scenario)
    return type(raised.value), raised.value.args


async def test_raising_on_handoff(provider: TracerProvider, spans: Spans, open_spans: OpenSpans) -> None:
    plain = await outcome_of(oa.TextScenario(raising_on_handoff=True))
    instrumentor = OpenAIAgentsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await outcome_of(oa.TextScenario(raising_on_handoff=True))
    finally:
        instrumentor.uninstrument()
    assert traced == plain  # the exception goes on unchanged
    [handoff] = spans.handoffs()
    assert handoff.status.status_code is StatusCode.ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == "LookupError"
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.TO_AGENT_NAME] == "billing"
    [on_handoff] = spans.children(handoff)
    assert (on_handoff.name, on_handoff.status.status_code) == (sc.SPAN_ON_HANDOFF, StatusCode.ERROR)
    assert open_spans.ours() == []


async def test_raising_input_filter(traced: Spans) -> None:
    with pytest.raises(ValueError):
        await oa.run_text(oa.TextScenario(input_filter_delay=0.0, raising_input_filter=True))
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.ERROR_TYPE] == "ValueError"
    named = phases(traced, handoff)
    assert list(named) == [sc.SPAN_ON_HANDOFF, sc.SPAN_INPUT_FILTER]
    assert named[sc.SPAN_INPUT_FILTER].status.status_code is StatusCode.ERROR
    assert named[sc.SPAN_ON_HANDOFF].status.status_code is StatusCode.UNSET


async def test_agent_hooks_alone_make_a_hooks_phase(traced: Spans) -> None:
    scenario = oa.TextScenario(agent_hooks=True)
    await oa.run_text(scenario)
    assert "agent_hooks" in scenario.events  # the SDK called them (on the source agent)
    [handoff] = traced.handoffs()
    assert list(phases(traced, handoff)) == [
        sc.SPAN_ON_HANDOFF,
        sc.SPAN_HOOKS,
        sc.SPAN_SETUP,
        sc.SPAN_FIRST_OUTPUT,
    ]


async def test_the_apps_span_is_the_parent_and_its_group_id_the_conversation(traced: Spans) -> None:
    scenario = oa.TextScenario()
    from conftest import PROVIDER

    tracer = PROVIDER.get_tracer("app")
    with tracer.start_as_current_span("support call") as app_span:
        await Runner.run(scenario.agents(), oa.USER_INPUT, run_config=RunConfig(group_id="thread-7"))
    [handoff] = traced.handoffs()
    assert handoff.parent.span_id == app_span.get_span_context().span_id
    assert handoff.attributes[sc.GEN_AI_CONVERSATION_ID] == "thread-7"
    assert traced.named(sc.SPAN_CHAT) == []


@pytest.mark.parametrize("mode", ["run", "streamed"])
async def test_results_and_event_order_unchanged(
    provider: TracerProvider, spans: Spans, sdk_traces: SdkTraces, mode: str
) -> None:
    def scenario() -> oa.TextScenario:
        return oa.TextScenario(chain=True, hooks_delay=0.0, input_filter_delay=0.0)

    plain = await oa.run_text(scenario(), mode)
    instrumentor = OpenAIAgentsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await oa.run_text(scenario(), mode)
    finally:
        instrumentor.uninstrument()
    assert traced == plain
    assert len(spans.handoffs()) == 2


@pytest.mark.parametrize("order", ["openinference-first", "openinference-last"])
async def test_openinference_replacing_the_sdk_processors_leaves_ours(
    instrument: Any, spans: Spans, order: str
) -> None:
    openinference = pytest.importorskip("openinference.instrumentation.openai_agents")
    from conftest import PROVIDER

    others = openinference.OpenAIAgentsInstrumentor()
    if order == "openinference-first":
        others.instrument(tracer_provider=PROVIDER)
    instrument(OpenAIAgentsHandoffInstrumentor)
    if order == "openinference-last":
        others.instrument(tracer_provider=PROVIDER)
    try:
        await oa.run_text(oa.TextScenario(), "streamed")
    finally:
        others.uninstrument()
    [handoff] = spans.handoffs()
    assert [c.name for c in spans.children(handoff)] == TEXT_PHASES
    theirs = [s for s in spans.all() if s.instrumentation_scope.name.startswith("openinference")]
    assert theirs, "openinference traced the run too"
    # ours sits in their trace, under the span current where the SDK runs the handoff
    parent = spans.by_id(handoff.parent.span_id)
    assert parent in theirs
    assert handoff.context.trace_id == parent.context.trace_id


async def test_metrics(traced: Spans, metric_reader: Any) -> None:
    await oa.run_text(oa.TextScenario(input_filter_delay=0.0))
    points: dict[str, list[Any]] = {}
    for resource in metric_reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    [duration] = points[sc.METRIC_DURATION]
    assert duration.attributes[sc.FRAMEWORK] == sc.FRAMEWORK_OPENAI_AGENTS
    assert (duration.attributes[sc.FROM_AGENT_NAME], duration.attributes[sc.TO_AGENT_NAME]) == (
        "triage",
        "billing",
    )
    assert {p.attributes[sc.PHASE] for p in points[sc.METRIC_PHASE_DURATION]} == {
        sc.PHASE_ON_HANDOFF,
        sc.PHASE_INPUT_FILTER,
        sc.PHASE_SETUP,
        sc.PHASE_FIRST_OUTPUT,
    }


async def test_a_fault_in_our_code_never_reaches_the_run(
    traced: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("bug in otel-handoff")

    monkeypatch.setattr(_text, "begin", broken)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        output, _events = await oa.run_text(oa.TextScenario(chain=True))
        await oa.run_text(oa.TextScenario(chain=True))
    assert output == oa.REFUNDS_REPLY
    assert traced.handoffs() == []
    assert len([r for r in caplog.records if "internal error" in r.getMessage()]) == 1  # logged once


# --- realtime sessions -------------------------------------------------------------------------------


async def test_realtime_handoff_over_the_real_websocket_model(traced: Spans, open_spans: OpenSpans) -> None:
    async with oa.LoopbackRealtimeServer(old_response_tail=0.25, ack_delay=0.1, audio_delay=0.05) as server:
        await oa.run_websocket_realtime(server, oa.realtime_agents())
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert (attributes[sc.TRIGGER], attributes[sc.GEN_AI_TOOL_NAME], attributes[sc.GEN_AI_TOOL_CALL_ID]) == (
        sc.TRIGGER_REALTIME_TOOL,
        "transfer_to_billing",
        "call_billing",
    )
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == "sess_loopback"  # the server's own session id
    assert attributes[sc.OLD_RESPONSE_RUNNING] is True  # the old agent was still speaking
    assert sc.ENDED_BY not in attributes
    named = phases(traced, handoff)
    assert list(named) == REALTIME_PHASES
    assert lasted(named[sc.SPAN_SESSION_UPDATE], 0.1)  # session.updated came late
    assert lasted(named[sc.SPAN_RESPONSE_DRAIN], 0.2)  # the new response waited for the old one
    assert lasted(named[sc.SPAN_FIRST_AUDIO], 0.05)
    assert named[sc.SPAN_RESPONSE_DRAIN].end_time <= named[sc.SPAN_FIRST_AUDIO].start_time
    assert handoff.end_time == named[sc.SPAN_FIRST_AUDIO].end_time
    assert attributes[sc.DURATION] >= 0.25
    assert open_spans.ours() == []


async def test_realtime_client_messages_unchanged(provider: TracerProvider, spans: Spans) -> None:
    async def messages() -> tuple[list[str], list[str]]:
        async with oa.LoopbackRealtimeServer(old_response_tail=0.05, audio_delay=0.0) as server:
            events = await oa.run_websocket_realtime(server, oa.realtime_agents())
        return server.received, [e for e in events if e != "raw_model_event"]

    plain = await messages()
    instrumentor = OpenAIAgentsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await messages()
    finally:
        instrumentor.uninstrument()
    assert traced == plain
    assert len(spans.handoffs()) == 1


async def test_realtime_handoff_with_the_scripted_model(traced: Spans) -> None:
    model = oa.LatentRealtimeModel(ack_delay=0.04, old_response_tail=0.0, audio_delay=0.06)
    await oa.run_scripted_realtime(model, oa.realtime_agents(on_handoff_delay=0.03, instructions_delay=0.02))
    [handoff] = traced.handoffs()
    named = phases(traced, handoff)
    assert list(named) == REALTIME_PHASES
    assert lasted(named[sc.SPAN_ON_HANDOFF], 0.03)
    assert lasted(named[sc.SPAN_SETTINGS], 0.02)  # the new agent's dynamic instructions
    assert lasted(named[sc.SPAN_SESSION_UPDATE], 0.04)
    assert lasted(named[sc.SPAN_FIRST_AUDIO], 0.06)
    assert handoff.attributes[sc.OLD_RESPONSE_RUNNING] is False  # done before the output was sent
    assert_back_to_back([named[sc.SPAN_ON_HANDOFF], named[sc.SPAN_SETTINGS], named[sc.SPAN_RESPONSE_DRAIN]])


async def test_a_send_through_an_overriding_models_super_counts_once(traced: Spans) -> None:
    """The base model's send_event wrapped too (a session used it), the subclass's calls super()."""
    plain = await oa.RealtimeRunner(oa.realtime_agents(), model=oa.ScriptedRealtimeModel(strict=False)).run()
    async with plain:
        pass
    await oa.run_scripted_realtime(oa.LatentRealtimeModel(audio_delay=0.0), oa.realtime_agents())
    [handoff] = traced.handoffs()
    assert list(phases(traced, handoff)) == REALTIME_PHASES


async def test_realtime_session_closed_before_the_new_agent_speaks(
    traced: Spans, open_spans: OpenSpans
) -> None:
    model = oa.LatentRealtimeModel(ack_delay=60.0, old_response_tail=60.0, audio_delay=60.0)
    session = await oa.RealtimeRunner(oa.realtime_agents(), model=model).run()
    async with session:
        await model.ask_for_billing()
        await asyncio.wait_for(model.output_sent.wait(), oa.SESSION_TIMEOUT)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.ENDED_BY] == sc.ENDED_BY_SESSION_CLOSE
    assert handoff.attributes[sc.OLD_RESPONSE_RUNNING] is True
    named = phases(traced, handoff)
    # what never finished ends with the handoff, without a duration
    assert sc.SESSION_UPDATE_DURATION not in handoff.attributes
    assert sc.RESPONSE_DRAIN_DURATION not in handoff.attributes
    assert named[sc.SPAN_RESPONSE_DRAIN].end_time == handoff.end_time
    assert sc.SPAN_FIRST_AUDIO not in named
    assert open_spans.ours() == []


async def test_realtime_interrupted_during_the_handoff(traced: Spans, open_spans: OpenSpans) -> None:
    model = oa.LatentRealtimeModel(old_response_tail=0.05, audio_delay=0.05, interrupt=True)
    await oa.run_scripted_realtime(model, oa.realtime_agents())
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.INTERRUPTED] is True
    assert list(phases(traced, handoff)) == REALTIME_PHASES
    assert open_spans.ours() == []


async def test_realtime_raising_on_handoff(traced: Spans, open_spans: OpenSpans) -> None:
    model = oa.LatentRealtimeModel()
    session = await oa.RealtimeRunner(oa.realtime_agents(raising_on_handoff=True), model=model).run()
    async with session:
        await model.ask_for_billing()
        seen = []
        async for event in session:
            seen.append(event.type)
            if event.type == "error" or len(traced.handoffs()) == 1:
                break
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == "LookupError"
    [on_handoff] = traced.children(handoff)
    assert (on_handoff.name, on_handoff.status.status_code) == (sc.SPAN_ON_HANDOFF, StatusCode.ERROR)
    assert open_spans.ours() == []


# --- the instrumentor --------------------------------------------------------------------------------


def wrapped_now() -> dict[str, Any]:
    import agents.run as run
    import agents.run_internal.run_loop as run_loop
    import agents.run_internal.turn_resolution as turn_resolution
    from agents.realtime.session import RealtimeSession

    return {
        "run": vars(run.AgentRunner)["run"],
        "run_streamed": vars(run.AgentRunner)["run_streamed"],
        "execute_handoffs": turn_resolution.execute_handoffs,
        "model_run_context": run_loop.model_run_context,
        "model_run_context_stream": run_loop.model_run_context_stream,
        **{
            name: vars(RealtimeSession)[name]
            for name in (
                "__init__",
                "on_event",
                "_handle_tool_call",
                "_get_updated_model_settings_from_agent",
                "close",
            )
        },
        "send_event": vars(oa.LatentRealtimeModel)["send_event"],
        "inherited send_event": vars(oa.ScriptedRealtimeModel).get("send_event"),
    }


async def test_uninstrument_restores_everything(provider: TracerProvider, spans: Spans) -> None:
    before = wrapped_now()
    instrumentor = OpenAIAgentsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    assert wrapped_now()["execute_handoffs"] is not before["execute_handoffs"]
    await oa.run_scripted_realtime(oa.LatentRealtimeModel(), oa.realtime_agents())
    assert wrapped_now()["send_event"] is not before["send_event"]  # wrapped once a session used it
    instrumentor.uninstrument()
    assert wrapped_now() == before
    spans_before = len(spans.handoffs())
    await oa.run_text(oa.TextScenario())
    await oa.run_scripted_realtime(oa.LatentRealtimeModel(), oa.realtime_agents())
    assert len(spans.handoffs()) == spans_before


async def test_noop_providers_cost_no_span_or_metric_work(
    provider: TracerProvider, spans: Spans, sdk_traces: SdkTraces, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_SDK_DISABLED or NoOp providers: the emitter builds no attributes, spans or points."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    from otel_handoff.core import emit

    built: list[int] = []
    attributes = emit._attributes
    monkeypatch.setattr(emit, "_attributes", lambda *args: built.append(1) or attributes(*args))

    async def run_with(tracer_provider: Any) -> None:
        instrumentor = OpenAIAgentsHandoffInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=NoOpMeterProvider())
        try:
            assert (await oa.run_text(oa.TextScenario(chain=True)))[0] == oa.REFUNDS_REPLY
        finally:
            instrumentor.uninstrument()

    await run_with(NoOpTracerProvider())
    assert built == []
    await run_with(provider)
    assert len(built) == 2 and len(spans.handoffs()) == 2
