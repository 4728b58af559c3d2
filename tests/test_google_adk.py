"""Google ADK transfers, traced on the real ADK offline: text runs (both runtimes) and live sessions.

Only the model edges are scripted (``otel_handoff.cli.offline.google_adk``). ADK's own tracing is
on, as an app turns it on: its tracer uses the global provider, set here to the test provider.
google-adk pins opentelemetry below what livekit-agents needs, so this module runs in an
environment of its own (``tests/test_google_adk_environment.py`` makes it and runs it there).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import subprocess
import sys
from typing import Any

import pytest
import wrapt

pytest.importorskip("google.adk", reason="google-adk runs in its own environment (test_environments)")

import itertools

from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.plugins.plugin_manager import PluginManager
from google.adk.runners import Runner
from google.adk.tools import AgentTool
from google.adk.tools.tool_context import ToolContext
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans, recorded_warnings

from otel_handoff.cli.offline import google_adk as ga
from otel_handoff.core import schema as sc
from otel_handoff.google_adk import GoogleADKHandoffInstrumentor

TEXT_PHASES = [sc.SPAN_DELIVERY, sc.SPAN_TOOL, sc.SPAN_DELIVERY, sc.SPAN_SETUP, sc.SPAN_FIRST_OUTPUT]
LIVE_PHASES = [
    sc.SPAN_TOOL,
    sc.SPAN_TRANSFER_DELAY,
    sc.SPAN_CLOSE,
    sc.SPAN_SETUP,
    sc.SPAN_CONNECT,
    sc.SPAN_SEND_HISTORY,
    sc.SPAN_FIRST_AUDIO,
]


@pytest.fixture(scope="module", autouse=True)
def adk_tracing_on(provider: TracerProvider) -> None:
    """ADK's own spans on the test provider: its tracer is a proxy onto the global provider."""
    trace.set_tracer_provider(provider)


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(GoogleADKHandoffInstrumentor)
    return spans


def seconds(span: ReadableSpan) -> float:
    return (span.end_time - span.start_time) / 1e9


def phase_names(spans: Spans, handoff: ReadableSpan) -> list[str]:
    return [child.name for child in spans.children(handoff)]


def adk_span(spans: Spans, name: str) -> ReadableSpan:
    found = [s for s in spans.all() if s.name == name and s.instrumentation_scope.name == "gcp.vertex.agent"]
    assert len(found) == 1, [s.name for s in spans.all()]
    return found[0]


def assert_back_to_back(spans: Spans, handoff: ReadableSpan) -> None:
    """Phases run one after another, inside the handoff."""
    children = spans.children(handoff)
    for earlier, later in itertools.pairwise(children):
        assert earlier.end_time <= later.start_time, (earlier.name, later.name)
    assert handoff.start_time <= children[0].start_time
    assert children[-1].end_time <= handoff.end_time


# --- text -------------------------------------------------------------------------------------------


async def test_text_transfer_is_one_handoff_under_the_transferring_agent(traced: Spans) -> None:
    result = await ga.run_text(ga.text_agents(instructions_delay=0.02, billing_latency=0.12))
    assert result.error is None
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_GOOGLE_ADK
    assert attributes[sc.FRAMEWORK_VERSION] == ga_version()
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.GEN_AI_TOOL_NAME] == "transfer_to_agent"
    assert attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-transfer-1"
    assert attributes[sc.TRIGGER] == sc.TRIGGER_TOOL
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert attributes[sc.SEQUENCE] == 1
    assert sc.ENDED_BY not in attributes
    assert handoff.status.status_code is StatusCode.UNSET
    # ADK's own conversation id is the session's id, on its spans as on ours
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == result.session_id
    invoke_triage = adk_span(traced, "invoke_agent triage")
    assert invoke_triage.attributes[sc.GEN_AI_CONVERSATION_ID] == result.session_id
    # under the transferring agent's span (1.x: the new agent runs inside it), or, where that span is
    # over first (2.x's node runtime; Jaeger flags a child that outlives its parent), beside it under
    # its parent, linked to it
    if invoke_triage.end_time < handoff.end_time:
        assert handoff.parent.span_id == invoke_triage.parent.span_id
        assert invoke_triage.context.span_id in [link.context.span_id for link in handoff.links]
    else:
        assert handoff.parent.span_id == invoke_triage.context.span_id
    assert handoff.context.trace_id == adk_span(traced, "invoke_agent billing").context.trace_id
    assert attributes[sc.FRAMEWORK_INVOCATION_ID].startswith("e-")
    assert phase_names(traced, handoff) == TEXT_PHASES
    assert_back_to_back(traced, handoff)
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    # the new agent's instruction provider (20 ms) is setup; its model (120 ms) is first_output
    assert attributes[sc.SETUP_DURATION] >= 0.02
    assert attributes[sc.FIRST_OUTPUT_DURATION] >= 0.12
    # the span starts at the transferring model's response, before ADK's tool span
    tool_span = adk_span(traced, "execute_tool transfer_to_agent")
    assert handoff.start_time <= tool_span.start_time
    assert traced.children(handoff, sc.SPAN_TOOL)[0].end_time >= tool_span.end_time
    generate = [s for s in traced.all() if s.name.startswith("generate_content") and "billing" in s.name]
    assert generate and handoff.end_time >= generate[0].start_time


def ga_version() -> str:
    from importlib.metadata import version

    return version("google-adk")


@pytest.mark.parametrize("root", ["llm_agent", "sequential"])
async def test_the_apps_own_loop_is_delivery_not_adk(traced: Spans, root: str) -> None:
    """ADK holds the agent until the app asks for the next event: 50 ms per event is the app's."""
    agents = ga.text_agents(instructions_delay=0.0)
    tree = agents if root == "llm_agent" else SequentialAgent(name="pipeline", sub_agents=[agents])
    result = await ga.run_text(tree, consumer_delay=0.05)
    assert result.error is None
    [handoff] = traced.handoffs()
    deliveries = traced.children(handoff, sc.SPAN_DELIVERY)
    assert len(deliveries) == 2  # the function call's event and the transfer's response
    assert all(seconds(d) >= 0.05 for d in deliveries)
    assert handoff.attributes[sc.DELIVERY_DURATION] == pytest.approx(sum(map(seconds, deliveries)), abs=1e-6)
    assert handoff.attributes[sc.SETUP_DURATION] < 0.05  # not blamed on ADK
    # 2.x runs an LlmAgent root on its node runtime; other roots (and every 1.x) nest the new agent
    node_runtime = int(ga_version().split(".")[0]) >= 2 and root == "llm_agent"
    expected = sc.PATH_NODE if node_runtime else sc.PATH_NESTED
    assert handoff.attributes[sc.FRAMEWORK_PATH] == expected
    # under the transferring agent's span (nested: the new agent runs inside it), or, where that
    # span is over first (the node runtime), beside it under its parent, linked to it
    triage = adk_span(traced, "invoke_agent triage")
    if triage.end_time < handoff.end_time:
        assert handoff.parent.span_id == triage.parent.span_id
        assert triage.context.span_id in [link.context.span_id for link in handoff.links]
    else:
        assert handoff.parent.span_id == triage.context.span_id


async def test_unknown_target_is_rejected_with_adks_error(traced: Spans) -> None:
    plain = await ga.run_text(ga.text_agents(target="nobody"))
    traced_result = await ga.run_text(ga.text_agents(target="nobody"))
    assert type(traced_result.error) is type(plain.error)
    assert isinstance(plain.error, ValueError)
    assert str(traced_result.error) == str(plain.error)
    [handoff] = [
        h for h in traced.handoffs() if h.attributes[sc.GEN_AI_CONVERSATION_ID] == traced_result.session_id
    ]
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_UNKNOWN_AGENT
    assert handoff.status.status_code is StatusCode.ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == type(plain.error).__qualname__
    assert handoff.attributes[sc.TO_AGENT_NAME] == "nobody"


async def test_disallowed_peer_is_rejected(traced: Spans) -> None:
    refunds = LlmAgent(name="refunds", model=ga.ScriptedLlm(model="r", script=[ga.reply("ok")]))
    billing = LlmAgent(
        name="billing",
        model=ga.ScriptedLlm(model="b", script=[ga.transfer_call("refunds", call_id="call-peer")]),
        disallow_transfer_to_peers=True,
    )
    triage = LlmAgent(
        name="triage",
        model=ga.ScriptedLlm(model="t", script=[ga.transfer_call("billing")]),
        sub_agents=[billing, refunds],
    )
    result = await ga.run_text(triage)
    first, second = traced.handoffs()
    assert first.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert (second.attributes[sc.FROM_AGENT_NAME], second.attributes[sc.TO_AGENT_NAME]) == (
        "billing",
        "refunds",
    )
    assert second.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-peer"
    if result.error is None:  # google-adk 2.0.0's node runtime lets the transfer through
        assert any(event.author == "refunds" for event in result.events)
        assert second.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    else:
        assert isinstance(result.error, ValueError)
        assert second.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
        assert second.attributes[sc.REJECTION_REASON] == sc.REJECTED_NOT_ALLOWED
    assert second.attributes[sc.SEQUENCE] == 2


async def test_two_transfers_in_one_response_one_runs_the_other_is_rejected(traced: Spans) -> None:
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    calls = [
        types.Part(
            function_call=types.FunctionCall(id=f"call-{n}", name="transfer_to_agent", args={"agent_name": n})
        )
        for n in ("billing", "refunds")
    ]
    both = LlmResponse(content=types.Content(role="model", parts=calls))
    billing = LlmAgent(name="billing", model=ga.ScriptedLlm(model="b", script=[ga.reply("b")]))
    refunds = LlmAgent(name="refunds", model=ga.ScriptedLlm(model="r", script=[ga.reply("r")]))
    triage = LlmAgent(
        name="triage", model=ga.ScriptedLlm(model="t", script=[both]), sub_agents=[billing, refunds]
    )
    result = await ga.run_text(triage)
    assert result.error is None
    ran = next(e.author for e in result.events if e.author in ("billing", "refunds"))
    handoffs = traced.handoffs()
    assert sorted(h.attributes[sc.OUTCOME] for h in handoffs) == [sc.OUTCOME_COMPLETED, sc.OUTCOME_REJECTED]
    completed = next(h for h in handoffs if h.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED)
    rejected = next(h for h in handoffs if h.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED)
    assert completed.attributes[sc.TO_AGENT_NAME] == ran
    assert rejected.attributes[sc.REJECTION_REASON] == sc.REJECTED_MULTIPLE


async def test_any_tool_setting_the_action_is_a_handoff_and_agent_tool_is_not(traced: Spans) -> None:
    def escalate_to_billing(tool_context: ToolContext) -> dict[str, str]:
        """Sends the customer to billing."""
        tool_context.actions.transfer_to_agent = "billing"
        return {"status": "ok"}

    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    call = types.FunctionCall(id="call-custom", name="escalate_to_billing", args={})
    asks = LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
    billing = LlmAgent(name="billing", model=ga.ScriptedLlm(model="b", script=[ga.reply("b")]))
    triage = LlmAgent(
        name="triage",
        model=ga.ScriptedLlm(model="t", script=[asks]),
        tools=[escalate_to_billing],
        sub_agents=[billing],
    )
    assert (await ga.run_text(triage)).error is None
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.GEN_AI_TOOL_NAME] == "escalate_to_billing"
    assert handoff.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-custom"
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED

    # an agent used as a tool answers and returns: the caller keeps the conversation
    traced_before = len(traced.handoffs())
    helper = LlmAgent(name="helper", model=ga.ScriptedLlm(model="h", script=[ga.reply("helped")]))
    use = types.FunctionCall(id="call-tool", name="helper", args={"request": "look it up"})
    host = LlmAgent(
        name="host",
        model=ga.ScriptedLlm(
            model="host",
            script=[
                LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=use)])),
                ga.reply("done"),
            ],
        ),
        tools=[AgentTool(agent=helper)],
    )
    assert (await ga.run_text(host)).error is None
    assert len(traced.handoffs()) == traced_before


async def test_sequence_counts_per_session_across_runs(traced: Spans) -> None:
    billing = LlmAgent(
        name="billing", model=ga.ScriptedLlm(model="b", script=[ga.transfer_call("triage", "call-back")])
    )
    triage = LlmAgent(
        name="triage",
        model=ga.ScriptedLlm(model="t", script=[ga.transfer_call("billing"), ga.reply("triage again")]),
        sub_agents=[billing],
    )
    from google.adk.runners import InMemoryRunner

    runner = InMemoryRunner(agent=triage, app_name=ga.APP)
    session = await runner.session_service.create_session(app_name=ga.APP, user_id=ga.USER)
    async for _ in runner.run_async(user_id=ga.USER, session_id=session.id, new_message=ga.message("hello")):
        pass
    await runner.close()
    handoffs = traced.handoffs()
    assert [(h.attributes[sc.FROM_AGENT_NAME], h.attributes[sc.TO_AGENT_NAME]) for h in handoffs] == [
        ("triage", "billing"),
        ("billing", "triage"),
    ]
    assert [h.attributes[sc.SEQUENCE] for h in handoffs] == [1, 2]
    assert {h.attributes[sc.GEN_AI_CONVERSATION_ID] for h in handoffs} == {session.id}


async def test_a_run_that_ends_before_the_new_agent_speaks(traced: Spans) -> None:
    """The app stops iterating right after the transfer's event: the handoff ends with the run."""
    runner_events = []
    from google.adk.runners import InMemoryRunner

    runner = InMemoryRunner(agent=ga.text_agents(), app_name=ga.APP)
    session = await runner.session_service.create_session(app_name=ga.APP, user_id=ga.USER)
    events = runner.run_async(user_id=ga.USER, session_id=session.id, new_message=ga.message("hi"))
    async for event in events:
        runner_events.append(event)
        if event.actions.transfer_to_agent:
            break
    await events.aclose()
    await runner.close()
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.ENDED_BY] == sc.ENDED_BY_RUN_END
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert sc.SPAN_FIRST_OUTPUT not in phase_names(traced, handoff)


# --- live -------------------------------------------------------------------------------------------


async def test_live_transfer_shows_the_fixed_delay_connect_and_first_audio(traced: Spans) -> None:
    result = await ga.run_live(ga.live_agents(connect_delay=0.15, first_audio_delay=0.35))
    assert result.error is None
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.TRIGGER] == sc.TRIGGER_LIVE_TOOL
    assert attributes[sc.FRAMEWORK_PATH] == sc.PATH_LIVE
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == result.session_id
    assert phase_names(traced, handoff) == LIVE_PHASES
    assert_back_to_back(traced, handoff)
    [delay] = traced.children(handoff, sc.SPAN_TRANSFER_DELAY)
    configured = delay.attributes[sc.TRANSFER_DELAY_CONFIGURED]
    assert configured == 1.0  # DEFAULT_TRANSFER_AGENT_DELAY in every supported release
    assert attributes[sc.TRANSFER_DELAY_DURATION] >= configured
    assert attributes[sc.CONNECT_DURATION] >= 0.15
    assert attributes[sc.FIRST_AUDIO_DURATION] >= 0.35
    # the span is the caller's silence: it ends when the new agent's first audio reaches the app
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    assert attributes[sc.DURATION] >= configured + 0.15 + 0.35
    # in ADK's live trace, under the transferring agent (ADK nests the new one inside it)
    invoke_triage = adk_span(traced, "invoke_agent triage")
    assert handoff.parent.span_id == invoke_triage.context.span_id
    assert adk_span(traced, "invoke_agent billing").parent.span_id == invoke_triage.context.span_id


async def test_live_session_closed_before_the_new_agent_speaks(traced: Spans, open_spans: OpenSpans) -> None:
    result = await ga.run_live(ga.live_agents(billing_speaks=False), hang_up_on_transfer=True)
    assert result.error is None
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.ENDED_BY] == sc.ENDED_BY_SESSION_CLOSE
    assert handoff.status.status_code is StatusCode.UNSET
    assert sc.SPAN_FIRST_AUDIO not in phase_names(traced, handoff)
    assert open_spans.ours() == []


async def test_live_unknown_target_is_rejected_after_the_delay(traced: Spans) -> None:
    result = await ga.run_live(ga.live_agents(target="nobody"))
    assert isinstance(result.error, ValueError)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_UNKNOWN_AGENT
    # ADK sleeps and closes the old connection before it looks the target up
    assert phase_names(traced, handoff)[:3] == [sc.SPAN_TOOL, sc.SPAN_TRANSFER_DELAY, sc.SPAN_CLOSE]


# --- invisible --------------------------------------------------------------------------------------

_VOLATILE = {"id", "timestamp", "invocation_id"}


def comparable(events: list[Any]) -> list[dict[str, Any]]:
    """What an event says, without what differs between any two runs (ids, times)."""
    return [e.model_dump(exclude=_VOLATILE, exclude_none=True, mode="json") for e in events]


def adk_tree(spans: list[ReadableSpan]) -> list[tuple[str, str | None, dict[str, Any]]]:
    by_id = {s.context.span_id: s for s in spans}
    volatile = (
        "gen_ai.conversation.id",
        "gcp.vertex.agent.invocation_id",
        "gcp.vertex.agent.event_id",
        "gcp.vertex.agent.session_id",
        "gcp.vertex.agent.llm_request",
        "gcp.vertex.agent.llm_response",
    )
    return sorted(
        (
            s.name,
            by_id[s.parent.span_id].name if s.parent and s.parent.span_id in by_id else None,
            {k: v for k, v in s.attributes.items() if k not in volatile},
        )
        for s in spans
        if s.instrumentation_scope.name == "gcp.vertex.agent"
    )


@pytest.mark.parametrize("mode", ["text", "live"])
async def test_the_app_sees_the_same_events_session_spans_and_warnings(
    instrument: Any, spans: Spans, mode: str
) -> None:
    async def observe() -> tuple[Any, Any, Any, Any]:
        spans.all()
        with recorded_warnings() as warned:
            if mode == "text":
                result = await ga.run_text(ga.text_agents(instructions_delay=0.0), consumer_delay=0.001)
            else:
                result = await ga.run_live(ga.live_agents(connect_delay=0.01, first_audio_delay=0.05))
        found = [s for s in spans.all()]
        spans._exporter.clear()
        return comparable(result.events), comparable(result.stored), adk_tree(found), warned

    plain = await observe()
    instrumentor = instrument(GoogleADKHandoffInstrumentor)
    traced = await observe()
    assert traced[0] == plain[0]  # the events, their order and content
    assert traced[1] == plain[1]  # what the session stored
    assert traced[2] == plain[2]  # ADK's own spans, their parents and attributes
    assert traced[3] == plain[3]  # warnings, and where they point
    assert plain[0], "the scenario ran"
    instrumentor.uninstrument()


def test_no_plugin_of_ours_and_uninstrument_restores_everything(instrument: Any) -> None:
    names = (
        "run_before_agent_callback",
        "run_before_tool_callback",
        "run_after_tool_callback",
        "run_before_model_callback",
        "run_after_model_callback",
    )
    before = {name: PluginManager.__dict__[name] for name in names}
    runner_before = (Runner.__dict__["run_async"], Runner.__dict__["run_live"])
    instrumentor = instrument(GoogleADKHandoffInstrumentor)
    assert all(PluginManager.__dict__[name] is not before[name] for name in names)
    runner = (
        Runner(app_name="a", agent=ga.text_agents(), session_service=_sessions(), auto_create_session=True)
        if ("auto_create_session" in inspect.signature(Runner).parameters)
        else Runner(app_name="a", agent=ga.text_agents(), session_service=_sessions())
    )
    assert runner.plugin_manager.plugins == []
    asyncio.run(ga.run_live(ga.live_agents(connect_delay=0.0, first_audio_delay=0.0)))
    lazily = list(type(instrumentor)._telemetry.lazily_wrapped)
    assert {name for _, name in lazily} >= {"connect", "close", "send_history"}
    instrumentor.uninstrument()
    assert {name: PluginManager.__dict__[name] for name in names} == before
    assert (Runner.__dict__["run_async"], Runner.__dict__["run_live"]) == runner_before
    for owner, name in lazily:
        assert not isinstance(vars(owner)[name], wrapt.ObjectProxy), (owner, name)
    assert not isinstance(BaseLlmConnection.__dict__["close"], wrapt.ObjectProxy)


def _sessions() -> Any:
    from google.adk.sessions import InMemorySessionService

    return InMemorySessionService()


async def test_a_fault_of_ours_costs_the_trace_not_the_run(
    traced: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_handoff.google_adk import _transfer

    def broken_tool(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug of ours")

    def broken_agent(*args: Any, **kwargs: Any) -> None:
        raise KeyError("another")

    monkeypatch.setattr(_transfer.Run, "tool_ended", broken_tool)
    monkeypatch.setattr(_transfer.Run, "agent_started", broken_agent)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        plain_like = await ga.run_text(ga.text_agents())
        again = await ga.run_text(ga.text_agents())
    assert plain_like.error is None and again.error is None
    assert [e.author for e in again.events] == ["triage", "triage", "billing"]
    ours = [r for r in caplog.records if r.name == "otel_handoff"]
    assert len(ours) == 2  # each distinct fault once, however often it happens


async def test_metrics_per_handoff_and_per_phase(traced: Spans, metric_reader: Any) -> None:
    await ga.run_text(ga.text_agents(instructions_delay=0.0))
    points: dict[str, list[Any]] = {}
    for resource in metric_reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    [duration] = points[sc.METRIC_DURATION]
    assert duration.attributes[sc.FRAMEWORK] == sc.FRAMEWORK_GOOGLE_ADK
    assert duration.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    phases = {p.attributes[sc.PHASE]: p.count for p in points[sc.METRIC_PHASE_DURATION]}
    # one point per phase and handoff: the two deliveries add up
    assert phases == {sc.PHASE_TOOL: 1, sc.PHASE_DELIVERY: 1, sc.PHASE_SETUP: 1, sc.PHASE_FIRST_OUTPUT: 1}


def test_without_adks_tracing_our_span_stands_alone(tmp_path: Any) -> None:
    """No global provider (ADK's spans off): ours, on the provider given, is a root."""
    script = """
import asyncio, json
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_handoff.google_adk import GoogleADKHandoffInstrumentor
from otel_handoff.cli.offline import google_adk as ga
exporter = InMemorySpanExporter(); provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
GoogleADKHandoffInstrumentor().instrument(tracer_provider=provider)
asyncio.run(ga.run_text(ga.text_agents(instructions_delay=0.0)))
found = exporter.get_finished_spans()
print(json.dumps([(s.name, s.parent is not None, s.instrumentation_scope.name) for s in found]))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    roots = [name for name, has_parent, _ in found if not has_parent]
    assert roots == [sc.SPAN_HANDOFF]
    assert all(scope.startswith("otel_handoff") for _, _, scope in found)


async def test_beside_openinference(instrument: Any, spans: Spans) -> None:
    instrumentation = pytest.importorskip("openinference.instrumentation.google_adk")
    from conftest import PROVIDER

    other = instrumentation.GoogleADKInstrumentor()
    other.instrument(tracer_provider=PROVIDER)
    if not other.is_instrumented_by_opentelemetry:  # it declares the ADK releases it supports
        pytest.skip(f"openinference's ADK instrumentation refuses google-adk {ga_version()}")
    try:
        instrument(GoogleADKHandoffInstrumentor)
        result = await ga.run_text(ga.text_agents(instructions_delay=0.0))
    finally:
        other.uninstrument()
    assert result.error is None
    [handoff] = spans.handoffs()
    theirs = [s for s in spans.all() if s.instrumentation_scope.name.startswith("openinference")]
    assert theirs, "openinference traced the run"
    assert {s.context.trace_id for s in theirs} == {handoff.context.trace_id}
    assert phase_names(spans, handoff) == TEXT_PHASES


async def test_concurrent_sessions_keep_their_own_transfers(traced: Spans) -> None:
    """Runs interleave on one event loop; each transfer is its own session's, with its phases."""
    results = await asyncio.gather(
        *(ga.run_text(ga.text_agents(instructions_delay=0.0), consumer_delay=0.01 * n) for n in range(4))
    )
    assert all(result.error is None for result in results)
    handoffs = traced.handoffs()
    assert sorted(h.attributes[sc.GEN_AI_CONVERSATION_ID] for h in handoffs) == sorted(
        result.session_id for result in results
    )
    for handoff in handoffs:
        assert phase_names(traced, handoff) == TEXT_PHASES
        assert handoff.attributes[sc.SEQUENCE] == 1
        assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
