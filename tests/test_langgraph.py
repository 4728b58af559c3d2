"""LangGraph handoffs, traced on real LangGraph offline: langgraph-swarm, langgraph-supervisor and
the app's own ``Command(graph=PARENT)`` tools, sync and async. Only the chat models are scripted
(``otel_handoff.cli.offline.langgraph``)."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest

pytest.importorskip(
    "langgraph_supervisor", reason="needs langgraph, langgraph-swarm and langgraph-supervisor"
)

import itertools

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from support import Spans

from otel_handoff.cli.offline import langgraph as lg
from otel_handoff.core import schema as sc
from otel_handoff.langgraph import LangGraphHandoffInstrumentor

PHASES = [sc.SPAN_HANDLER, sc.SPAN_CONTEXT_UPDATE, sc.SPAN_START, sc.SPAN_FIRST_OUTPUT]
HANDBACK_PHASES = [sc.SPAN_CONTEXT_UPDATE, sc.SPAN_START, sc.SPAN_FIRST_OUTPUT]


@pytest.fixture
def traced(instrument: Any, spans: Spans) -> Spans:
    instrument(LangGraphHandoffInstrumentor)
    return spans


def seconds(span: ReadableSpan) -> float:
    return (span.end_time - span.start_time) / 1e9


def phase_names(spans: Spans, handoff: ReadableSpan) -> list[str]:
    return [child.name for child in spans.children(handoff)]


def version() -> str:
    from importlib.metadata import version

    return version("langgraph")


@pytest.mark.parametrize("how", ["async-updates", "async-messages", "sync-values"])
def test_swarm_handoff_is_one_span_with_its_phases(traced: Spans, how: str) -> None:
    graph = lg.swarm(billing_latency=0.12)
    if how.startswith("async"):
        asyncio.run(lg.run_async(graph, stream_mode=how.split("-")[1]))
    else:
        lg.run_sync(graph, stream_mode="values")
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_LANGGRAPH
    assert attributes[sc.FRAMEWORK_VERSION] == version()
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert (attributes[sc.GEN_AI_TOOL_NAME], attributes[sc.GEN_AI_TOOL_CALL_ID]) == (
        "transfer_to_billing",
        "call-swarm-1",
    )
    assert attributes[sc.TRIGGER] == sc.TRIGGER_TOOL
    assert attributes[sc.GEN_AI_CONVERSATION_ID] == lg.THREAD
    assert attributes[sc.SEQUENCE] == 1
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert sc.ENDED_BY not in attributes
    assert handoff.status.status_code is StatusCode.UNSET  # ParentCommand is the mechanism
    assert phase_names(traced, handoff) == PHASES
    children = traced.children(handoff)
    for earlier, later in itertools.pairwise(children):
        assert earlier.end_time <= later.start_time
    assert attributes[sc.FIRST_OUTPUT_DURATION] >= 0.12
    assert attributes[sc.DURATION] == pytest.approx(seconds(handoff), abs=1e-6)
    assert handoff.parent is None  # no span around the app's call: a trace of its own
    # the in-memory checkpointer saved the old agent's step, the parent's and the new agent's first
    assert attributes[sc.CHECKPOINT_WRITES] >= 3


@pytest.mark.parametrize("checkpointer", [True, False])
def test_a_swarm_inside_a_parent_graph(traced: Spans, checkpointer: bool) -> None:
    """The swarm as one node of the app's graph: its agents are not the top level's nodes, and
    the handoff is the swarm's; without a checkpointer nothing is saved on the way."""
    builder = StateGraph(MessagesState)
    builder.add_node("team", lg.swarm(checkpointer=False))
    builder.add_node("after", lambda state: {})
    builder.add_edge(START, "team")
    builder.add_edge("team", "after")
    graph = builder.compile(checkpointer=InMemorySaver() if checkpointer else None)
    lg.run_sync(graph, thread=lg.THREAD if checkpointer else None)
    [handoff] = traced.handoffs()
    attributes = handoff.attributes
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert phase_names(traced, handoff) == PHASES
    assert (attributes[sc.CHECKPOINT_WRITES] > 0) is checkpointer


def test_supervisor_delegation_and_its_handback_with_the_extra_supervisor_call(traced: Spans) -> None:
    asyncio.run(lg.run_async(lg.supervisor(supervisor_latency=0.08, billing_latency=0.12)))
    delegation, handback = traced.handoffs()
    assert (delegation.attributes[sc.FROM_AGENT_NAME], delegation.attributes[sc.TO_AGENT_NAME]) == (
        "supervisor",
        "billing",
    )
    assert delegation.attributes[sc.TRIGGER] == sc.TRIGGER_TOOL
    assert phase_names(traced, delegation) == PHASES
    assert delegation.attributes[sc.FIRST_OUTPUT_DURATION] >= 0.12
    assert (handback.attributes[sc.FROM_AGENT_NAME], handback.attributes[sc.TO_AGENT_NAME]) == (
        "billing",
        "supervisor",
    )
    assert handback.attributes[sc.TRIGGER] == sc.TRIGGER_HANDBACK
    assert handback.attributes[sc.GEN_AI_TOOL_NAME] == "transfer_back_to_supervisor"
    assert handback.attributes[sc.SEQUENCE] == 2
    assert phase_names(traced, handback) == HANDBACK_PHASES
    # what a delegation really costs: the supervisor's whole second model call is in the hand-back
    assert handback.attributes[sc.FIRST_OUTPUT_DURATION] >= 0.08
    assert handback.start_time >= delegation.end_time
    assert {h.status.status_code for h in (delegation, handback)} == {StatusCode.UNSET}


@pytest.mark.parametrize("how", ["async", "sync"])  # sync: the two targets run in LangGraph's threads
def test_the_apps_own_tool_and_each_send_is_a_handoff(traced: Spans, how: str) -> None:
    graph = lg.fan_out_graph(["billing", "refunds"])
    if how == "async":
        asyncio.run(lg.run_async(graph, thread=None))
    else:
        lg.run_sync(graph, thread=None)
    handoffs = traced.handoffs()
    assert sorted(h.attributes[sc.TO_AGENT_NAME] for h in handoffs) == ["billing", "refunds"]
    assert {h.attributes[sc.GEN_AI_TOOL_NAME] for h in handoffs} == {"dispatch"}
    assert {h.attributes[sc.GEN_AI_TOOL_CALL_ID] for h in handoffs} == {"call-app-1"}
    assert all(sc.GEN_AI_CONVERSATION_ID not in h.attributes for h in handoffs)  # no thread id: none
    assert sorted(h.attributes[sc.SEQUENCE] for h in handoffs) == [1, 2]
    assert all(phase_names(traced, h) == PHASES for h in handoffs)


def test_a_handoff_to_an_unknown_node_follows_the_error_convention(
    traced: Spans, caplog: pytest.LogCaptureFixture
) -> None:
    """LangGraph ignores a ``goto`` to a node the graph lacks (a warning) and ends the run."""
    with caplog.at_level(logging.WARNING, logger="langgraph"):
        asyncio.run(lg.run_async(lg.fan_out_graph("nobody"), thread=None))
    assert any("nobody" in r.getMessage() for r in caplog.records if r.name == "langgraph")
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.TO_AGENT_NAME] == "nobody"
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_TARGET_NOT_RUN
    assert handoff.status.status_code is StatusCode.ERROR


def test_sequence_counts_per_thread_across_invocations(traced: Spans) -> None:
    asyncio.run(lg.run_async(lg.swarm(), thread="thread-7"))
    asyncio.run(lg.run_async(lg.swarm(), thread="thread-7"))
    asyncio.run(lg.run_async(lg.swarm(), thread="thread-8"))
    by_thread = sorted(
        (h.attributes[sc.GEN_AI_CONVERSATION_ID], h.attributes[sc.SEQUENCE]) for h in traced.handoffs()
    )
    assert by_thread == [("thread-7", 1), ("thread-7", 2), ("thread-8", 1)]


def _quick_swarm() -> Any:
    return lg.swarm(triage_latency=0.02, billing_latency=0.05, checkpointer=False)


@pytest.mark.parametrize("how", ["async", "threads"])
def test_concurrent_runs_keep_their_own_handoffs(traced: Spans, provider: Any, how: str) -> None:
    """Two requests at once, same agent names, no thread id: each handoff is its own run's."""
    tracer = provider.get_tracer("app")
    requests = ["request a", "request b"]

    def sync_request(name: str) -> Any:
        with tracer.start_as_current_span(name) as span:
            lg.run_sync(_quick_swarm(), thread=None)
        return span

    async def async_request(name: str) -> Any:
        with tracer.start_as_current_span(name) as span:
            await lg.run_async(_quick_swarm(), thread=None)
        return span

    async def both() -> list[Any]:
        return list(await asyncio.gather(*(async_request(name) for name in requests)))

    if how == "async":
        app_spans = asyncio.run(both())
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            app_spans = list(pool.map(sync_request, requests))
    handoffs = traced.handoffs()
    assert sorted(h.parent.span_id for h in handoffs) == sorted(
        s.get_span_context().span_id for s in app_spans
    )
    for handoff in handoffs:
        assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
        assert handoff.attributes[sc.SEQUENCE] == 1
        assert phase_names(traced, handoff) == PHASES


def test_a_stream_the_app_stops_ends_its_handoff_and_the_next_run_is_traced(traced: Spans) -> None:
    stream = lg.swarm().stream(lg.question(), lg.config(), stream_mode="updates")
    first = next(stream)  # the triage step, with its handoff
    stream.close()  # the app stops reading before billing runs
    assert list(first) == ["triage"]
    [stopped] = traced.handoffs()
    assert stopped.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED  # its target never ran
    assert stopped.status.status_code is StatusCode.ERROR
    lg.run_sync(lg.swarm(), thread="another thread")
    finished = [h for h in traced.handoffs() if h is not stopped and h.name == stopped.name]
    [after] = [h for h in finished if h.attributes[sc.GEN_AI_CONVERSATION_ID] == "another thread"]
    assert after.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert phase_names(traced, after) == PHASES


def test_under_the_apps_span(traced: Spans, provider: Any) -> None:
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("handle request") as app_span:
        lg.run_sync(lg.swarm())
    [handoff] = traced.handoffs()
    assert handoff.parent.span_id == app_span.get_span_context().span_id
    assert handoff.context.trace_id == app_span.get_span_context().trace_id


def test_beside_openinference_in_one_trace(instrument: Any, spans: Spans, provider: Any) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    other = LangChainInstrumentor()
    other.instrument(tracer_provider=provider)
    try:
        instrument(LangGraphHandoffInstrumentor)
        with provider.get_tracer("app").start_as_current_span("handle request"):
            asyncio.run(lg.run_async(lg.swarm()))
    finally:
        other.uninstrument()
    [handoff] = spans.handoffs()
    theirs = [s for s in spans.all() if s.instrumentation_scope.name.startswith("openinference")]
    assert theirs and {s.context.trace_id for s in theirs} == {handoff.context.trace_id}
    assert phase_names(spans, handoff) == PHASES
    # openinference reports LangGraph's ParentCommand as errors; ours is a completed handoff
    assert handoff.status.status_code is StatusCode.UNSET


class Recorder(BaseCallbackHandler):
    """The app's own callback handler: what it receives, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.seen.append(("chain_start", kwargs.get("name")))

    def on_chain_end(self, outputs: Any, **kwargs: Any) -> None:
        self.seen.append(("chain_end", None))

    def on_chain_error(self, error: BaseException, **kwargs: Any) -> None:
        self.seen.append(("chain_error", type(error).__name__))

    def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
        self.seen.append(("tool_start", kwargs.get("name")))

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self.seen.append(("tool_end", type(output).__name__))

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.seen.append(("chat_model_start", None))

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.seen.append(("token", token))

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.seen.append(("llm_end", None))


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _comparable(part: Any) -> Any:
    """A streamed part or state without what differs between any two runs: message ids, and the
    task ids LangGraph derives from time-based checkpoint ids (in namespaces and metadata)."""
    if hasattr(part, "model_dump"):
        part = part.model_dump()
    if isinstance(part, dict):
        return {k: _comparable(v) for k, v in part.items() if k != "id"}
    if isinstance(part, (list, tuple)):
        return [_comparable(v) for v in part]
    if isinstance(part, str):
        return _UUID.sub("U", part)
    return part


@pytest.mark.parametrize(
    ("mode", "subgraphs"), [("values", False), ("updates", True), ("messages", False), ("messages", True)]
)
def test_the_app_sees_the_same_stream_state_checkpoints_and_callbacks(
    instrument: Any, spans: Spans, mode: str, subgraphs: bool
) -> None:
    def observe() -> tuple[Any, Any, Any, Any]:
        graph = lg.supervisor(supervisor_latency=0.0, billing_latency=0.0)
        recorder = Recorder()
        config = lg.config(callbacks=[recorder])
        parts = asyncio.run(_stream(graph, config, mode, subgraphs))
        state = graph.get_state(lg.config())
        checkpoints = [c.metadata.get("step") for c in graph.get_state_history(lg.config())]
        return _comparable(parts), _comparable(state.values), checkpoints, recorder.seen

    plain = observe()
    instrument(LangGraphHandoffInstrumentor)
    traced = observe()
    assert len(spans.handoffs()) == 2
    assert traced[0] == plain[0]  # the stream
    assert traced[1] == plain[1]  # the final state
    assert traced[2] == plain[2]  # the checkpoints
    assert traced[3] == plain[3]  # the app's own callbacks, every event in order


async def _stream(graph: Any, config: Any, mode: str, subgraphs: bool) -> list[Any]:
    return [
        part async for part in graph.astream(lg.question(), config, stream_mode=mode, subgraphs=subgraphs)
    ]


def test_uninstrument_restores_every_method(spans: Spans, provider: Any) -> None:
    import langgraph_supervisor.supervisor as supervisor
    from langchain_core.callbacks.manager import AsyncCallbackManager, CallbackManager
    from langchain_core.tools import BaseTool
    from langgraph.pregel import _loop, _runner

    def originals() -> list[Any]:
        return [
            _loop.SyncPregelLoop.__enter__,
            _loop.AsyncPregelLoop.__aexit__,
            _runner.run_with_retry,
            _runner.arun_with_retry,
            BaseTool.run,
            BaseTool.arun,
            CallbackManager.on_chat_model_start,
            AsyncCallbackManager.on_llm_start,
            supervisor.create_handoff_back_messages,
        ]

    before = originals()
    instrumentor = LangGraphHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    assert all(a is not b for a, b in zip(originals(), before, strict=True))
    instrumentor.uninstrument()
    assert originals() == before
    lg.run_sync(lg.supervisor())
    assert spans.handoffs() == []


def test_a_fault_of_ours_costs_the_trace_not_the_run(
    traced: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otel_handoff.langgraph import _handoffs

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(_handoffs.Invocation, "decided", broken)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        first = lg.run_sync(lg.swarm())
        second = lg.run_sync(lg.swarm())
    assert _comparable(first) == _comparable(second)
    assert [k for part in first for k in part] == ["triage", "billing"]
    assert len([r for r in caplog.records if r.name == "otel_handoff"]) == 1


def test_a_failing_handoff_tool_is_a_failed_handoff(traced: Spans) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node(lg.raising_handoff_agent())
    builder.add_edge(START, "triage")
    with pytest.raises(RuntimeError, match="CRM"):  # the app sees the tool's exception, unchanged
        lg.run_sync(builder.compile(), thread=None)
    [handoff] = traced.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert handoff.attributes[sc.ERROR_TYPE] == "RuntimeError"
    assert phase_names(traced, handoff)[0] == sc.SPAN_HANDLER


def test_no_handoff_no_span_and_current_context_untouched(traced: Spans, provider: Any) -> None:
    model = lg.ScriptedChatModel(who="solo", script=[AIMessage(content="hello")])
    builder = StateGraph(MessagesState)
    builder.add_node(lg.agent("solo", model, [], "s"))
    builder.add_edge(START, "solo")
    before = trace.get_current_span()
    lg.run_sync(builder.compile(), thread=None)
    assert trace.get_current_span() is before
    assert traced.handoffs() == []


def test_langgraph_frees_its_loop_by_reference_count(instrument: Any, spans: Spans) -> None:
    """LangGraph's own test (``test_pregel_loop_refcount``): after a run, with the collector off, no
    ``SyncPregelLoop`` or ``PregelRunner`` is left; nothing of ours may hold one. (A run with a
    handoff leaves some of LangGraph's own, in its ``ParentCommand`` tracebacks: as many with us.)"""
    import gc

    from langgraph.pregel._loop import SyncPregelLoop
    from langgraph.pregel._runner import PregelRunner

    def solo() -> Any:
        builder = StateGraph(MessagesState)
        builder.add_node("solo", lambda state: {"messages": [AIMessage(content="hi")]})
        builder.add_edge(START, "solo")
        return builder.compile()

    def swarm() -> Any:
        return lg.swarm(triage_latency=0.0, billing_latency=0.0, checkpointer=False)

    def left_after(make: Any) -> int:
        app = make()
        gc.collect()
        gc.disable()
        try:
            app.invoke(lg.question())
            return len([o for o in gc.get_objects() if isinstance(o, (SyncPregelLoop, PregelRunner))])
        finally:
            gc.enable()

    plain = left_after(solo), left_after(swarm)
    instrument(LangGraphHandoffInstrumentor)
    assert (left_after(solo), left_after(swarm)) == plain
    assert plain[0] == 0 and len(spans.handoffs()) == 1


def test_a_stream_left_open_does_not_hide_the_next_run(traced: Spans) -> None:
    """The app reads one part of a stream and keeps it (not closed): its run stays current in the
    app's context; the next run is its own all the same."""
    left_open = lg.swarm().stream(lg.question(), lg.config("left open"), stream_mode="updates")
    assert list(next(left_open)) == ["triage"]
    lg.run_sync(lg.swarm(), thread="next run")
    [handoff] = [h for h in traced.handoffs() if h.attributes[sc.GEN_AI_CONVERSATION_ID] == "next run"]
    assert handoff.attributes[sc.SEQUENCE] == 1 and handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert phase_names(traced, handoff) == PHASES
    left_open.close()
    assert len(traced.handoffs()) == 2  # the one left open ended when the app closed its stream
