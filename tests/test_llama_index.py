"""LlamaIndex ``AgentWorkflow`` handoffs, traced on real LlamaIndex offline: the built-in ``handoff``
tool taken, refused (unknown or not allowed), several in one response, a failing new agent, runs
streamed, awaited and resumed from their context. Only the LLM is scripted
(``otel_handoff.cli.offline.llama_index``)."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import nullcontext
from typing import Any

import pytest

pytest.importorskip("llama_index.core.agent.workflow", reason="needs llama-index-core")

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.memory import Memory
from llama_index.core.workflow import Context
from opentelemetry.trace import StatusCode
from support import Spans

from otel_handoff.cli.offline import llama_index as li
from otel_handoff.core import schema as sc
from otel_handoff.llama_index import LlamaIndexHandoffInstrumentor

PHASES = [sc.SPAN_HANDLER, sc.SPAN_CONTEXT_UPDATE, "agent_handoff.setup", sc.SPAN_FIRST_OUTPUT]
ANSWER = {"text": "Billing here: your last invoice was paid."}
REASON = "the customer disputes invoice 4711"  # model-written: never in a span


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(LlamaIndexHandoffInstrumentor)
    return spans


def phases(spans: Spans, handoff: Any) -> list[str]:
    return [child.name for child in spans.children(handoff)]


def version() -> str:
    from importlib.metadata import version

    return version("llama-index-core")


@pytest.mark.parametrize(("stream", "streaming"), [(True, True), (False, True), (False, False)])
def test_a_handoff_is_one_span_from_the_tool_to_the_first_output(
    traced: Spans, stream: bool, streaming: bool
) -> None:
    workflow = li.make_workflow(
        [li.handoff_call("billing", "call-1", REASON)], [ANSWER], latency=0.05, streaming=streaming
    )
    workflow.agents["billing"].llm.latency = 0.12
    result, _ = asyncio.run(li.run(workflow, "Why was I charged twice?", stream=stream))
    assert result.current_agent_name == "billing"
    [handoff] = traced.handoffs()
    a = handoff.attributes
    assert a[sc.FRAMEWORK] == "llama-index" and a[sc.FRAMEWORK_VERSION] == version()
    assert (a[sc.FROM_AGENT_NAME], a[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert (a[sc.GEN_AI_TOOL_NAME], a[sc.GEN_AI_TOOL_CALL_ID]) == ("handoff", "call-1")
    assert a[sc.OUTCOME] == sc.OUTCOME_COMPLETED and a[sc.SEQUENCE] == 1
    assert sc.GEN_AI_CONVERSATION_ID not in a  # no Memory of the app's: no conversation id
    assert handoff.status.status_code is StatusCode.UNSET
    assert phases(traced, handoff) == PHASES
    [first_output] = traced.children(handoff, sc.SPAN_FIRST_OUTPUT)
    assert 0.11 < (first_output.end_time - first_output.start_time) / 1e9 < 0.5  # billing's model call
    assert REASON not in repr(a)


@pytest.mark.parametrize(
    ("target", "can_handoff_to", "reason", "to_agent"),
    [
        ("refunds", ("billing",), sc.REJECTED_UNKNOWN_AGENT, None),
        ("billing", (), sc.REJECTED_NOT_ALLOWED, "billing"),
    ],
)
def test_a_refused_handoff_is_rejected_with_the_extra_model_call(
    traced: Spans, target: str, can_handoff_to: tuple[str, ...], reason: str, to_agent: str | None
) -> None:
    workflow = li.make_workflow(
        [li.handoff_call(target, "call-bad"), {"text": "I will answer myself."}],
        [],
        can_handoff_to=can_handoff_to,
        latency=0.06,
    )
    result, _ = asyncio.run(li.run(workflow, "Refund me"))
    assert result.current_agent_name == "triage"
    assert workflow.agents["triage"].llm.calls == 2
    [handoff] = traced.handoffs()
    a = handoff.attributes
    assert a[sc.OUTCOME] == sc.OUTCOME_REJECTED and a[sc.REJECTION_REASON] == reason
    assert a.get(sc.TO_AGENT_NAME) == to_agent and a[sc.FROM_AGENT_NAME] == "triage"
    assert a[sc.ERROR_TYPE] == sc.OUTCOME_REJECTED
    assert phases(traced, handoff) == PHASES
    [first_output] = traced.children(handoff, sc.SPAN_FIRST_OUTPUT)
    assert (first_output.end_time - first_output.start_time) / 1e9 > 0.05  # triage asked again


def test_a_react_agents_handoff_is_traced_alike(traced: Spans) -> None:
    """ReActAgent asks for the tool in its text (``Action: handoff``) and calls its model without tools."""
    import json

    from llama_index.core.agent.workflow import AgentWorkflow, ReActAgent

    action = {"to_agent": "billing", "reason": REASON}
    step = {"text": f"Thought: billing should answer.\nAction: handoff\nAction Input: {json.dumps(action)}"}
    answer = {"text": "Thought: I can answer without using any more tools.\nAnswer: Paid."}
    triage = ReActAgent(
        name="triage", description="Routes.", llm=li.ScriptedLLM([step]), can_handoff_to=["billing"]
    )
    billing = ReActAgent(name="billing", description="Invoices.", llm=li.ScriptedLLM([answer], latency=0.1))
    workflow = AgentWorkflow(agents=[triage, billing], root_agent="triage")
    result, _ = asyncio.run(li.run(workflow, "Why?"))
    assert result.current_agent_name == "billing"
    [handoff] = traced.handoffs()
    a = handoff.attributes
    assert (a[sc.FROM_AGENT_NAME], a[sc.TO_AGENT_NAME], a[sc.OUTCOME]) == ("triage", "billing", "completed")
    assert phases(traced, handoff) == PHASES
    [first_output] = traced.children(handoff, sc.SPAN_FIRST_OUTPUT)
    assert (first_output.end_time - first_output.start_time) / 1e9 > 0.09  # billing's model call


def test_several_handoff_calls_in_one_response_are_one_span_for_the_one_taken(traced: Spans) -> None:
    both = [li.handoff_call("refunds", "call-a"), li.handoff_call("billing", "call-b")]
    workflow = li.make_workflow([both], [ANSWER])
    result, _ = asyncio.run(li.run(workflow, "Help"))
    assert result.current_agent_name == "billing"
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.GEN_AI_TOOL_CALL_ID] == "call-b"
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED


def test_the_new_agent_failing_is_an_error_with_its_type(traced: Spans) -> None:
    workflow = li.make_workflow([li.handoff_call("billing", "call-1")], [])  # billing's script is empty
    with pytest.raises(Exception) as raised:
        asyncio.run(li.run(workflow, "Why?"))
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.ERROR_TYPE] in {"IndexError", type(raised.value).__qualname__}
    assert handoff.status.status_code is StatusCode.ERROR


def test_max_iterations_never_ends_a_handoff_in_flight(traced: Spans) -> None:
    """LlamaIndex checks it on an agent's output: before a handoff's tool runs, or once the new
    agent has answered; the handoff is complete, the run ends as it does without us."""
    from llama_index.core.workflow import WorkflowRuntimeError

    workflow = li.make_workflow([li.handoff_call("billing", "call-1")], [ANSWER])
    # raised on the second agent output from 0.13 on; 0.12 counts its iterations apart
    with contextlib.suppress(WorkflowRuntimeError):
        asyncio.run(li.run(workflow, "Why?", max_iterations=2))
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED


def test_the_memory_session_is_the_conversation_and_a_resumed_run_counts_on(traced: Spans) -> None:
    async def scenario() -> None:
        workflow = li.make_workflow(
            [li.handoff_call("billing", "call-1")],
            [ANSWER, li.handoff_call("triage", "call-2")],
        )
        workflow.agents["triage"].llm._script.append({"text": "Triage again."})
        memory = Memory.from_defaults(session_id="session-7", token_limit=40000)
        ctx = Context(workflow)
        await li.run(workflow, "first", ctx=ctx, memory=memory)
        await li.run(workflow, "second", ctx=ctx, memory=memory)

    asyncio.run(scenario())
    handoffs = traced.handoffs()
    assert [h.attributes[sc.SEQUENCE] for h in handoffs] == [1, 2]
    assert {h.attributes[sc.GEN_AI_CONVERSATION_ID] for h in handoffs} == {"session-7"}
    assert [h.attributes[sc.TO_AGENT_NAME] for h in handoffs] == ["billing", "triage"]


def test_under_the_apps_span_and_concurrent_workflows_keep_their_own(traced: Spans, provider: Any) -> None:
    tracer = provider.get_tracer("app")

    async def one(name: str) -> Any:
        with tracer.start_as_current_span(name) as span:
            workflow = li.make_workflow([li.handoff_call("billing", f"call-{name}")], [ANSWER])
            await li.run(workflow, name)
            return span

    async def both() -> list[Any]:
        return list(await asyncio.gather(one("a"), one("b")))

    app_spans = asyncio.run(both())
    handoffs = traced.handoffs()
    assert len(handoffs) == 2
    for app_span in app_spans:
        [mine] = [h for h in handoffs if h.parent.span_id == app_span.get_span_context().span_id]
        assert mine.attributes[sc.GEN_AI_TOOL_CALL_ID] == f"call-{app_span.name}"
        assert mine.attributes[sc.SEQUENCE] == 1


class AppHandler(BaseEventHandler):
    """The app's own handler on LlamaIndex's dispatcher: what it receives, in order."""

    seen: list[str] = []  # noqa: RUF012  (a pydantic field: each handler gets its own list)

    @classmethod
    def class_name(cls) -> str:
        return "AppHandler"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.seen.append(type(event).__name__)


def _observe() -> tuple[Any, ...]:
    """What the app sees of a run with a refused and a taken handoff: the result, the streamed
    events, what its own dispatcher handler receives, the memory and the workflow's state after."""
    handler = AppHandler(seen=[])
    root = get_dispatcher()
    root.add_event_handler(handler)

    async def run() -> tuple[Any, ...]:
        workflow = li.make_workflow(
            [li.handoff_call("refunds", "call-0"), li.handoff_call("billing", "call-1")],
            [ANSWER],
            can_handoff_to=("billing",),
        )
        memory = Memory.from_defaults(session_id="session-1", token_limit=40000)
        run = workflow.run(user_msg="Why?", memory=memory, initial_state={"invoice": 4711})
        events = [(type(e).__name__, e.model_dump_json()) for e in [e async for e in run.stream_events()]]
        result = await run
        messages = [m.model_dump_json() for m in await memory.aget_all()]
        state = await run.ctx.store.get("state")
        return str(result.response), events, messages, state

    try:
        seen = asyncio.run(run())
    finally:
        root.event_handlers.remove(handler)
    return (*seen, handler.seen)


def dispatchers() -> tuple[Any, ...]:
    """The root dispatcher (the app's handlers) and the LLM callbacks' (ours while awaited)."""
    return get_dispatcher(), get_dispatcher("llama_index.core.llms.callbacks")


def test_the_app_sees_the_same_events_result_and_dispatcher_events(instrument: Any, spans: Spans) -> None:
    plain = _observe()
    before = [
        list(d.event_handlers) for d in (get_dispatcher(), get_dispatcher("llama_index.core.llms.callbacks"))
    ]
    instrumentor = instrument(LlamaIndexHandoffInstrumentor)
    traced = _observe()
    assert len(spans.handoffs()) == 2
    assert traced == plain
    instrumentor.uninstrument()
    after = [
        list(d.event_handlers) for d in (get_dispatcher(), get_dispatcher("llama_index.core.llms.callbacks"))
    ]
    assert after == before
    from llama_index.core.agent.workflow import AgentWorkflow

    assert not hasattr(AgentWorkflow.call_tool, "__wrapped__")
    spans_before = len(spans.all())
    assert _observe() == plain
    assert len(spans.all()) == spans_before


@pytest.mark.parametrize("apps_span", [True, False])
def test_beside_openinference_in_one_trace(
    instrument: Any, spans: Spans, provider: Any, apps_span: bool
) -> None:
    """Under the app's span; without one, in openinference's trace, where the handoff's tool ran."""
    openinference = pytest.importorskip("openinference.instrumentation.llama_index")
    if int(version().split(".")[1]) < 14:  # 0.x: its minor is the release line
        pytest.skip("openinference 4.6 records no LlamaIndex span before 0.14, without us too")
    other = openinference.LlamaIndexInstrumentor()
    other.instrument(tracer_provider=provider)
    try:
        instrument(LlamaIndexHandoffInstrumentor)
        workflow = li.make_workflow([li.handoff_call("billing", "call-1")], [ANSWER])
        with (
            provider.get_tracer("app").start_as_current_span("handle request") if apps_span else nullcontext()
        ):
            asyncio.run(li.run(workflow, "Why?"))
    finally:
        other.uninstrument()
    [handoff] = spans.handoffs()
    theirs = [s for s in spans.all() if s.instrumentation_scope.name.startswith("openinference")]
    assert theirs and {s.context.trace_id for s in theirs} == {handoff.context.trace_id}
    assert phases(spans, handoff) == PHASES
