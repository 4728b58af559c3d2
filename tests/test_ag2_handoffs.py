"""AG2 group-chat handoffs, traced from real offline group chats (every handoff kind)."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("autogen.agentchat.group", reason="needs the classic `autogen` package (ag2 < 1)")

from ag2_chats import a_run_chat, run_chat
from autogen.agentchat import groupchat
from autogen.agentchat.group import group_utils
from autogen.agentchat.group.group_tool_executor import GroupToolExecutor
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans, recorded_warnings
from wrapt import FunctionWrapper

from otel_handoff.ag2 import AG2HandoffInstrumentor
from otel_handoff.ag2 import _chat as ag2_chat
from otel_handoff.ag2.package import _instruments_any
from otel_handoff.cli.offline.ag2_classic import SUPPORT_CHAT_HANDOFFS, build_support_chat, reset_support_chat
from otel_handoff.core import schema as sc

# (owner, attribute) of every wrap point; the executor's methods are inherited from ConversableAgent
PATCHED = [
    (groupchat.GroupChatManager, "run_chat"),
    (groupchat.GroupChatManager, "a_run_chat"),
    (groupchat.GroupChat, "_run_input_guardrails"),
    (groupchat.GroupChat, "_run_output_guardrails"),
    (group_utils, "determine_next_agent"),
    (group_utils, "_evaluate_after_works_conditions"),
    (group_utils, "_run_oncontextconditions"),
]
INHERITED = [
    (GroupToolExecutor, "generate_tool_calls_reply"),
    (GroupToolExecutor, "a_generate_tool_calls_reply"),
]

ALLOWED_ATTRIBUTES = {
    sc.GEN_AI_OPERATION_NAME,
    sc.FROM_AGENT_NAME,
    sc.TO_AGENT_NAME,
    sc.GEN_AI_TOOL_NAME,
    sc.GEN_AI_TOOL_CALL_ID,
    sc.FRAMEWORK,
    sc.FRAMEWORK_VERSION,
    sc.KIND,
    sc.CONDITION_TYPE,
    sc.TARGET_TYPE,
    sc.NEXT_SPEAKER,
    sc.OUTCOME,
    sc.SEQUENCE,
    sc.DURATION,
    sc.CHAT_HANDOFFS,
    sc.ERROR_TYPE,
}


@pytest.fixture
def ag2(provider: Any, spans: Spans, open_spans: OpenSpans) -> Iterator[Spans]:
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield spans
    instrumentor.uninstrument()
    assert not open_spans.ours(), "every span started is ended"


def chat_spans(spans: Spans) -> dict[int, tuple[ReadableSpan | None, list[ReadableSpan]]]:
    """trace id -> (chat root span, handoff spans in sequence order)."""
    by_trace: dict[int, tuple[ReadableSpan | None, list[ReadableSpan]]] = {}
    for span in spans.all():
        _, handoffs = by_trace.setdefault(span.context.trace_id, (None, []))
        if span.name == sc.SPAN_CHAT:
            by_trace[span.context.trace_id] = (span, handoffs)
        elif span.name == sc.SPAN_HANDOFF:
            handoffs.append(span)
    for _, handoffs in by_trace.values():
        handoffs.sort(key=lambda s: s.attributes[sc.SEQUENCE])
    return by_trace


def assert_support_chat(handoffs: list[ReadableSpan], root: ReadableSpan | None = None) -> None:
    """The seven handoffs of the support chat: kind, from, to, condition, tool, target, order."""
    assert [s.attributes[sc.KIND] for s in handoffs] == [h[0] for h in SUPPORT_CHAT_HANDOFFS]
    for span, (kind, source, to, condition, tool, target) in zip(
        handoffs, SUPPORT_CHAT_HANDOFFS, strict=True
    ):
        attributes = span.attributes
        assert attributes[sc.GEN_AI_OPERATION_NAME] == sc.OPERATION_HANDOFF
        assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_AG2
        assert attributes[sc.FRAMEWORK_VERSION]
        assert attributes[sc.FROM_AGENT_NAME] == source, kind
        assert attributes.get(sc.TO_AGENT_NAME) == to, kind
        assert attributes.get(sc.NEXT_SPEAKER) == to, kind  # every target here names the next speaker
        assert attributes.get(sc.CONDITION_TYPE) == condition, kind
        assert attributes[sc.TARGET_TYPE] == target, kind
        assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED, kind
        if tool is None:
            assert sc.GEN_AI_TOOL_NAME not in attributes and sc.GEN_AI_TOOL_CALL_ID not in attributes, kind
        else:
            assert attributes[sc.GEN_AI_TOOL_NAME].startswith(tool), kind
            assert attributes[sc.GEN_AI_TOOL_CALL_ID].startswith("call_"), kind
        assert attributes[sc.DURATION] == pytest.approx((span.end_time - span.start_time) / 1e9)
    assert [s.attributes[sc.SEQUENCE] for s in handoffs] == list(range(1, len(SUPPORT_CHAT_HANDOFFS) + 1))
    starts = [s.start_time for s in handoffs]
    assert starts == sorted(starts)
    for earlier, later in itertools.pairwise(handoffs):
        assert earlier.end_time <= later.start_time, "a handoff lands before the next one is decided"
    if root is not None:
        assert root.attributes[sc.CHAT_HANDOFFS] == len(SUPPORT_CHAT_HANDOFFS)
        for span in handoffs:
            assert span.parent.span_id == root.context.span_id
            assert root.start_time <= span.start_time and span.end_time <= root.end_time


# --- every kind, sync and async ------------------------------------------------------------------
def test_every_kind_sync(ag2: Spans) -> None:
    run = run_chat(build_support_chat())
    assert run.last_speaker == "billing"
    ((root, handoffs),) = chat_spans(ag2).values()
    assert root is not None and root.parent is None  # the app traces nothing: one trace per chat
    assert_support_chat(handoffs, root)


async def test_every_kind_async(ag2: Spans) -> None:
    run = await a_run_chat(build_support_chat("async"))
    assert run.last_speaker == "billing"
    ((root, handoffs),) = chat_spans(ag2).values()
    assert_support_chat(handoffs, root)


def test_nests_in_the_apps_trace_without_changing_its_context(provider: Any, ag2: Spans) -> None:
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("app.chat") as app_span:
        run_chat(build_support_chat())
        assert trace.get_current_span() is app_span
    handoffs = ag2.handoffs()
    assert not ag2.named(sc.SPAN_CHAT), "no root of our own inside the app's trace"
    assert_support_chat(handoffs)
    for span in handoffs:
        assert span.context.trace_id == app_span.get_span_context().trace_id
        assert span.parent.span_id == app_span.get_span_context().span_id


# --- agents and executors that existed before instrument() ----------------------------------------
def test_agents_established_before_instrument_are_traced(provider: Any, spans: Spans) -> None:
    pattern = build_support_chat("early")
    run_chat(pattern)  # establishes the agents with AG2's own reply functions
    assert not spans.all()
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        reset_support_chat(pattern, "early")
        run_chat(pattern)
    finally:
        instrumentor.uninstrument()
    ((root, handoffs),) = chat_spans(spans).values()
    assert_support_chat(handoffs, root)  # the context condition included


# --- concurrent chats ----------------------------------------------------------------------------
def test_two_sync_chats_in_threads_keep_apart(ag2: Spans) -> None:
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def chat(tag: str) -> None:
        try:
            pattern = build_support_chat(tag)
            barrier.wait()
            run_chat(pattern)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=chat, args=(tag,)) for tag in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    chats = chat_spans(ag2)
    assert len(chats) == 2
    for root, handoffs in chats.values():
        assert_support_chat(handoffs, root)


async def test_two_async_chats_at_once_keep_apart(ag2: Spans) -> None:
    await asyncio.gather(a_run_chat(build_support_chat("one")), a_run_chat(build_support_chat("two")))
    chats = chat_spans(ag2)
    assert len(chats) == 2
    for root, handoffs in chats.values():
        assert_support_chat(handoffs, root)
    # the tool call ids name each chat's own scripts: no span strayed into the other trace
    for _, handoffs in chats.values():
        tags = {
            s.attributes[sc.GEN_AI_TOOL_CALL_ID].split("-")[0]
            for s in handoffs
            if sc.GEN_AI_TOOL_CALL_ID in s.attributes
        }
        assert len(tags) == 1


# --- how chats end -------------------------------------------------------------------------------
def test_chat_ending_on_terminate_completes_without_next_speaker(ag2: Spans) -> None:
    run_chat(build_support_chat())
    last = ag2.handoffs()[-1]
    assert last.attributes[sc.TARGET_TYPE] == "TerminateTarget"
    assert last.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert sc.NEXT_SPEAKER not in last.attributes and sc.TO_AGENT_NAME not in last.attributes


def test_handoff_cut_off_by_max_rounds_is_skipped(ag2: Spans) -> None:
    # round 5 is triage's turn, where the context condition fires; the chat stops before closer speaks
    run_chat(build_support_chat(), max_rounds=6)
    handoffs = ag2.handoffs()
    assert [s.attributes[sc.KIND] for s in handoffs] == ["llm_condition", "reply_result", "context_condition"]
    cut = handoffs[-1]
    assert cut.attributes[sc.OUTCOME] == sc.OUTCOME_SKIPPED
    assert cut.attributes[sc.TO_AGENT_NAME] == "closer"
    assert sc.NEXT_SPEAKER not in cut.attributes


def test_failing_chat_ends_every_span_with_error(ag2: Spans, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    select_speaker = groupchat.GroupChat.select_speaker

    def failing_select_speaker(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:  # right after the executor ran transfer_to_billing_1
            raise RuntimeError("selector down: refund for order 4711")
        return select_speaker(self, *args, **kwargs)

    monkeypatch.setattr(groupchat.GroupChat, "select_speaker", failing_select_speaker)
    with pytest.raises(RuntimeError, match="selector down"):
        run_chat(build_support_chat())
    ((root, handoffs),) = chat_spans(ag2).values()
    (failed,) = handoffs
    assert failed.attributes[sc.KIND] == sc.KIND_LLM_CONDITION
    assert failed.attributes[sc.OUTCOME] == sc.OUTCOME_ERROR
    assert failed.attributes[sc.ERROR_TYPE] == "RuntimeError"
    assert failed.status.status_code is StatusCode.ERROR
    assert "4711" not in (failed.status.description or ""), "exception messages may quote the chat"
    assert root.status.status_code is StatusCode.ERROR
    assert not failed.events


# --- invisible to the app --------------------------------------------------------------------------
def test_events_and_results_unchanged_by_instrumentation(provider: Any, spans: Spans) -> None:
    with recorded_warnings() as plain_warnings:
        plain = run_chat(build_support_chat())
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with recorded_warnings() as traced_warnings:
            traced = run_chat(build_support_chat())
    finally:
        instrumentor.uninstrument()
    assert traced_warnings == plain_warnings  # category, message, filename and line
    assert len(spans.handoffs()) == len(SUPPORT_CHAT_HANDOFFS)
    assert traced.history == plain.history
    assert traced.context == plain.context
    assert traced.last_speaker == plain.last_speaker
    assert traced.summary == plain.summary
    assert traced.events == plain.events
    assert any(event[0].endswith("TransitionEvent") for event in plain.events) or not hasattr(
        group_utils, "_NO_AFTER_WORK_MATCHED"
    ), "AG2 0.10.2+ emits its own transition events"


def test_no_content_in_any_attribute(ag2: Spans) -> None:
    run = run_chat(build_support_chat())
    private = [m["content"] for m in run.history if isinstance(m.get("content"), str) and m["content"]]
    private += [
        call["function"]["arguments"]
        for m in run.history
        for call in m.get("tool_calls") or ()
        if call["function"]["arguments"] != "{}"
    ]
    private += ["Route the customer.", "Handle refunds.", "4711", "Transfer to billing for refunds."]
    assert len(private) > 5
    # A secret counts whole: "4711" must not match the digits of a duration (0.00024711) or a hex id.
    leaks = [re.compile(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])") for secret in private]
    for span in ag2.all():
        assert set(span.attributes) <= ALLOWED_ATTRIBUTES, span.name
        for value in span.attributes.values():
            text = json.dumps(value)
            for leak in leaks:
                assert not leak.search(text), (span.name, leak.pattern)
        assert not span.events


# --- the instrumentor ----------------------------------------------------------------------------
def test_instrument_wraps_once_and_uninstrument_restores(provider: Any, spans: Spans) -> None:
    originals = [vars(owner)[name] for owner, name in PATCHED]
    original_context_conditions = group_utils._run_oncontextconditions
    original_run_chat = vars(groupchat.GroupChatManager)["run_chat"]
    instrumentor = AG2HandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    instrumentor.instrument(tracer_provider=provider)  # idempotent
    try:
        for (owner, name), original in zip(PATCHED, originals, strict=True):
            patched = vars(owner)[name]
            assert isinstance(patched, FunctionWrapper), name
            assert patched.__wrapped__ is original, f"{name} wrapped twice"
        for owner, name in INHERITED:
            assert isinstance(vars(owner)[name], FunctionWrapper), name
        pattern = build_support_chat()
        run_chat(pattern)
        triage = pattern.agents[0]
        manager = triage._group_manager
    finally:
        instrumentor.uninstrument()
    for (owner, name), original in zip(PATCHED, originals, strict=True):
        assert vars(owner)[name] is original, name
    for owner, name in INHERITED:
        assert name not in vars(owner), f"{name} override left on {owner.__name__}"
    # reply functions registered while instrumented are AG2's own again
    registered = [entry["reply_func"] for entry in triage._reply_func_list]
    assert original_context_conditions in registered
    assert not any(
        isinstance(func, FunctionWrapper) or type(func).__name__ == "BoundFunctionWrapper"
        for func in registered
    )
    manager_funcs = [entry["reply_func"] for entry in manager._reply_func_list]
    assert any(func is original_run_chat for func in manager_funcs)
    assert not any(type(func).__name__ == "BoundFunctionWrapper" for func in manager_funcs)
    # and chats after uninstrument() produce no spans
    spans_before = len(spans.all())
    reset_support_chat(pattern)
    run_chat(pattern)
    assert len(spans.all()) == spans_before


def test_instrumentation_dependencies_accept_either_distribution() -> None:
    from importlib.metadata import PackageNotFoundError, version

    (requirement,) = AG2HandoffInstrumentor().instrumentation_dependencies()
    assert requirement in _instruments_any
    name = requirement.split()[0]
    try:
        assert version(name)
    except PackageNotFoundError:  # pragma: no cover
        pytest.fail(f"{name} is not installed")


def test_faults_in_our_code_never_reach_the_chat(
    ag2: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    plain = run_chat(build_support_chat())
    ag2_spans_before = len(ag2.handoffs())

    def broken(self: Any, decision: Any) -> None:
        raise KeyError("renamed in a future AG2")

    monkeypatch.setattr(ag2_chat.ChatState, "decide", broken)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        faulty = run_chat(build_support_chat())
    assert faulty.history == plain.history and faulty.last_speaker == plain.last_speaker
    assert len(ag2.handoffs()) == ag2_spans_before
    assert any("internal error" in record.getMessage() for record in caplog.records)


def test_ag2_handoffs_are_counted_in_metrics(instrument: Any, spans: Spans, metric_reader: Any) -> None:
    instrumentor = instrument(AG2HandoffInstrumentor)
    try:
        run_chat(build_support_chat("metrics"))
    finally:
        instrumentor.uninstrument()
    handoffs = [s for s in spans.all() if s.name == sc.SPAN_HANDOFF]
    counted: dict[str, int] = {}
    data = metric_reader.get_metrics_data()
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            if scope_metrics.scope.name != "otel_handoff":  # one meter for every framework
                continue
            for metric in scope_metrics.metrics:
                if metric.name == sc.METRIC_DURATION:
                    for point in metric.data.data_points:
                        assert point.attributes[sc.FRAMEWORK] == "ag2"  # only AG2 is instrumented here
                        kind = point.attributes[sc.KIND]
                        counted[kind] = counted.get(kind, 0) + point.count
    expected: dict[str, int] = {}
    for span in handoffs:
        expected[span.attributes[sc.KIND]] = expected.get(span.attributes[sc.KIND], 0) + 1
    assert counted == expected and sum(counted.values()) == len(handoffs) > 0
