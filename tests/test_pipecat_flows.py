"""Pipecat Flows node transitions, traced in a real PipelineWorker with a real context aggregator.

Only the model, the TTS and the output stage are scripted (``otel_handoff.cli.offline.pipecat_flows``).
"""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest

pytest.importorskip("pipecat.flows", reason="needs pipecat-ai >= 1.5.0 (pipecat.flows)")

from loguru import logger
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import StatusCode
from pipecat.flows import ContextStrategy, ContextStrategyConfig, FlowManager, FlowsFunctionSchema
from support import OpenSpans, Spans, Warning, recorded_warnings
from wrapt import FunctionWrapper

from otel_handoff.cli.offline import pipecat_flows as pf
from otel_handoff.core import schema as sc
from otel_handoff.pipecat import PipecatFlowsHandoffInstrumentor, _Flows, _transition

logger.remove()  # Pipecat logs every frame at DEBUG through loguru

# private: the caller's words, the model's summary, what tts_say says, function arguments/results
SECRET_WORDS = "my card is 4111"
SUMMARY_TEXT = "refunded order 4711 to card 4111"
SAY_TEXT = "checking your account"


@pytest.fixture
def flows(instrument: Any, spans: Spans) -> Spans:
    instrument(PipecatFlowsHandoffInstrumentor)
    return spans


# --- the app's flow -----------------------------------------------------------------------------
def node(name: str, *, functions: list[Any] = (), **config: Any) -> dict[str, Any]:
    return {
        "name": name,
        "role_message": f"You are the {name} desk.",
        "task_messages": [{"role": "developer", "content": f"Help at the {name} desk."}],
        "functions": list(functions),
        **config,
    }


def edge(name: str, target: Any, *, raises: bool = False, delay: float = 0.0) -> FlowsFunctionSchema:
    """A Flows function whose handler returns (result, next node) — a transition."""

    async def handler(args: dict[str, Any], flow_manager: FlowManager) -> tuple[Any, Any]:
        if delay:
            await asyncio.sleep(delay)
        if raises:
            raise RuntimeError(f"lookup failed for {args.get('card')}")
        return {"status": "ok", "card": args.get("card")}, target()

    return FlowsFunctionSchema(
        name=name, description=name, properties={"card": {"type": "string"}}, required=[], handler=handler
    )


def booking(**config: Any) -> dict[str, Any]:
    return node("booking", **config)


def greeting(target: Any = booking, **edge_options: Any) -> dict[str, Any]:
    return node("greeting", functions=[edge("go_to_booking", target, **edge_options)])


CALL = [("go_to_booking", {"card": SECRET_WORDS})]


async def tool_transition(
    target: Any = booking, *, at: str = "booking", replies: list[Any] | None = None, **options: Any
) -> pf.FlowRun:
    return await pf.run_flow(
        greeting(target),
        replies or ["Hello, how can I help?", CALL, "Booked."],
        [pf.user_says(SECRET_WORDS)],
        until=lambda fm: fm.current_node == at and not fm._llm.replies,  # the new node answered
        **options,
    )


def handoffs(spans: Spans) -> list[ReadableSpan]:
    return [s for s in spans.handoffs() if s.attributes[sc.FRAMEWORK] == sc.FRAMEWORK_PIPECAT]


def children(spans: Spans, handoff: ReadableSpan) -> dict[str, ReadableSpan]:
    return {c.name: c for c in spans.children(handoff)}


def check(handoff: ReadableSpan) -> dict[str, Any]:
    """The shared attributes, and a duration that is the sum of the phases."""
    import pipecat

    a = dict(handoff.attributes)
    assert a[sc.GEN_AI_OPERATION_NAME] == sc.OPERATION_HANDOFF
    assert a[sc.FRAMEWORK] == "pipecat-flows"
    assert a[sc.FRAMEWORK_VERSION] == pipecat.version()
    work = [spec.duration_attribute for spec in sc.PHASE_REGISTRY if spec.role == sc.ROLE_WORK]
    phases = [a[key] for key in work if key in a]
    assert a[sc.DURATION] == pytest.approx(sum(phases), abs=1e-6)
    assert a[sc.DURATION] <= (handoff.end_time - handoff.start_time) / 1e9 + 1e-6
    return a


# --- transitions ---------------------------------------------------------------------------------
async def test_tool_transition_with_append(flows: Spans, open_spans: OpenSpans) -> None:
    run = await tool_transition()
    assert run.final_node == "booking"
    (handoff,) = handoffs(flows)
    a = check(handoff)
    assert (a[sc.FROM_AGENT_NAME], a[sc.TO_AGENT_NAME]) == ("greeting", "booking")
    assert a[sc.TRIGGER] == sc.TRIGGER_TOOL and a[sc.GEN_AI_TOOL_NAME] == "go_to_booking"
    assert a[sc.GEN_AI_TOOL_CALL_ID].startswith("call_")
    assert a[sc.CONTEXT_STRATEGY] == "append" and a[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert a[sc.SEQUENCE] == 1
    kids = children(flows, handoff)
    assert set(kids) == {sc.SPAN_HANDLER, sc.SPAN_DELIVERY, sc.SPAN_CONTEXT_UPDATE}
    # the function result's way back to Flows: from the handler's end until _set_node begins
    assert kids[sc.SPAN_HANDLER].end_time == kids[sc.SPAN_DELIVERY].start_time
    assert kids[sc.SPAN_DELIVERY].end_time <= kids[sc.SPAN_CONTEXT_UPDATE].start_time
    # the node set up to the transition's end: made current, the model asked to respond
    assert kids[sc.SPAN_CONTEXT_UPDATE].end_time == handoff.end_time
    assert a[sc.DURATION] == pytest.approx(a[sc.HANDLER_DURATION] + a[sc.CONTEXT_UPDATE_DURATION], abs=1e-6)
    assert sc.UNATTRIBUTED_DURATION not in a  # the phases cover the transition
    # the caller heard the bot again in the new node: the dead air, linked to the handoff
    (speech,) = flows.named(sc.SPAN_FIRST_SPEECH)
    assert speech.links[0].context.span_id == handoff.context.span_id
    assert speech.attributes[sc.FIRST_SPEECH_DELAY] == pytest.approx(
        (speech.end_time - speech.start_time) / 1e9
    )
    assert speech.end_time >= handoff.end_time
    # Pipecat's tracing is off: one root per conversation, ended with it
    (root,) = flows.named(sc.SPAN_CHAT)
    assert handoff.parent.span_id == root.context.span_id and root.attributes[sc.CHAT_HANDOFFS] == 1
    assert open_spans.ours() == []


async def test_reset(flows: Spans) -> None:
    await tool_transition(
        lambda: booking(context_strategy=ContextStrategyConfig(strategy=ContextStrategy.RESET))
    )
    (handoff,) = handoffs(flows)
    assert check(handoff)[sc.CONTEXT_STRATEGY] == "reset"


async def test_reset_with_a_slow_summary(flows: Spans) -> None:
    strategy = ContextStrategyConfig(strategy=ContextStrategy.RESET_WITH_SUMMARY, summary_prompt="Summarize.")
    await tool_transition(lambda: booking(context_strategy=strategy), summary_delay=0.2, summary=SUMMARY_TEXT)
    (handoff,) = handoffs(flows)
    a = check(handoff)
    assert a[sc.CONTEXT_STRATEGY] == "reset_with_summary"
    kids = children(flows, handoff)
    summary, update = kids[sc.SPAN_SUMMARY], kids[sc.SPAN_CONTEXT_UPDATE]
    assert a[sc.SUMMARY_DURATION] >= 0.2  # the model call the caller waited for
    assert update.start_time <= summary.start_time and summary.end_time <= update.end_time
    assert a[sc.CONTEXT_UPDATE_DURATION] < a[sc.SUMMARY_DURATION]  # the summary is its own phase
    assert summary.status.status_code is StatusCode.UNSET


async def test_reset_with_a_summary_that_times_out(flows: Spans) -> None:
    """Flows gives the summary 5 s, then falls back to APPEND: the summary span says so."""
    strategy = ContextStrategyConfig(strategy=ContextStrategy.RESET_WITH_SUMMARY, summary_prompt="Summarize.")
    run = await tool_transition(lambda: booking(context_strategy=strategy), summary_delay=30.0)
    assert run.final_node == "booking"
    (handoff,) = handoffs(flows)
    a = check(handoff)
    assert a[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    summary = children(flows, handoff)[sc.SPAN_SUMMARY]
    assert summary.status.status_code is StatusCode.ERROR and summary.attributes[sc.ERROR_TYPE] == "timeout"
    assert a[sc.SUMMARY_DURATION] >= 5.0


async def test_tts_say_pre_action_holds_the_transition(flows: Spans) -> None:
    target = lambda: booking(pre_actions=[{"type": "tts_say", "text": SAY_TEXT}])  # noqa: E731
    await tool_transition(target, paced=True)
    (handoff,) = handoffs(flows)
    a = check(handoff)
    pre = children(flows, handoff)[sc.SPAN_PRE_ACTIONS]
    assert pre.attributes[sc.ACTIONS] == ("tts_say",)
    # the phrase played in real time (20 ms per character) before the new node was set
    assert a[sc.PRE_ACTIONS_DURATION] >= 0.02 * len(SAY_TEXT)
    assert pre.end_time <= children(flows, handoff)[sc.SPAN_CONTEXT_UPDATE].start_time


async def test_post_actions(flows: Spans) -> None:
    seen: list[str] = []

    async def note(action: dict[str, Any], flow_manager: FlowManager) -> None:
        seen.append(action["type"])

    target = lambda: booking(post_actions=[{"type": "note_visit", "handler": note}])  # noqa: E731
    await tool_transition(target)
    assert seen == ["note_visit"]
    (handoff,) = handoffs(flows)
    a = check(handoff)
    post = children(flows, handoff)[sc.SPAN_POST_ACTIONS]
    assert post.attributes[sc.ACTIONS] == ("note_visit",)
    # the node's set-up runs until the post-actions begin: no step of _set_node between them unnamed
    assert post.start_time == children(flows, handoff)[sc.SPAN_CONTEXT_UPDATE].end_time
    assert sc.POST_ACTIONS_DURATION in a


async def test_transition_waits_for_a_parallel_function_call(flows: Spans) -> None:
    """The model calls a transition and, beside it, a slower node function. Flows runs the
    transition only once no other call is in progress, and (pipecat-ai 1.5 to 1.14) checks that
    only when the transition's own result lands: the node function finishing later does not
    check again, so the transition never runs. The span shows the caller's wait and its end."""
    both = [("go_to_booking", {"card": SECRET_WORDS}), ("lookup_slow", {})]
    start = node("greeting", functions=[edge("go_to_booking", booking), _slow_lookup(0.2)])
    run = await pf.run_flow(
        start,
        ["Hello", both, "Your balance is 12."],
        [pf.user_says(SECRET_WORDS)],
        until=lambda fm: not fm._llm.replies,
    )
    assert run.final_node == "greeting"  # Flows' own behaviour, with or without us
    (handoff,) = handoffs(flows)
    a = check(handoff)
    assert a[sc.OUTCOME] == sc.OUTCOME_SKIPPED and a[sc.TRIGGER] == sc.TRIGGER_TOOL
    wait = children(flows, handoff)[sc.SPAN_FUNCTION_CALL_WAIT]
    assert sc.SPAN_DELIVERY not in children(flows, handoff)  # it never ran: nothing delivered
    assert a[sc.FUNCTION_CALL_WAIT_DURATION] >= 0.1  # at least most of the other call's 0.2 s
    assert wait.end_time == handoff.end_time  # it waited until the conversation ended
    # a wait, not a phase: the duration (the phases) and the wait fit in the span side by side
    assert a[sc.DURATION] + a[sc.FUNCTION_CALL_WAIT_DURATION] <= (handoff.end_time - handoff.start_time) / 1e9


def _slow_lookup(delay: float) -> FlowsFunctionSchema:
    async def handler(args: dict[str, Any], flow_manager: FlowManager) -> Any:
        await asyncio.sleep(delay)
        return {"balance": 12}

    return FlowsFunctionSchema(
        name="lookup_slow", description="lookup", properties={}, required=[], handler=handler
    )


async def test_transition_without_a_wait_has_no_wait_span(flows: Spans) -> None:
    await tool_transition()
    (handoff,) = handoffs(flows)
    assert sc.SPAN_FUNCTION_CALL_WAIT not in children(flows, handoff)
    assert sc.FUNCTION_CALL_WAIT_DURATION not in handoff.attributes


async def test_set_node_from_config_from_code(flows: Spans) -> None:
    async def move(flow_manager: FlowManager, worker: Any) -> None:
        await flow_manager.set_node_from_config(booking())

    run = await pf.run_flow(
        greeting(), ["Hello", "Booked."], [move], until=lambda fm: fm.current_node == "booking"
    )
    assert run.final_node == "booking"
    (handoff,) = handoffs(flows)
    a = check(handoff)
    assert a[sc.TRIGGER] == sc.TRIGGER_API and sc.GEN_AI_TOOL_NAME not in a
    assert sc.SPAN_HANDLER not in children(flows, handoff)


async def test_a_handler_that_raises_is_no_transition(flows: Spans) -> None:
    """Flows turns the handler's exception into an error result: the node stays, no handoff."""
    run = await pf.run_flow(
        node("greeting", functions=[edge("go_to_booking", booking, raises=True)]),
        ["Hello", CALL, "Sorry, try again."],
        [pf.user_says(SECRET_WORDS)],
        until=lambda fm: True,
    )
    assert run.final_node == "greeting"
    assert handoffs(flows) == []


async def test_end_conversation_node(flows: Spans, open_spans: OpenSpans) -> None:
    goodbye = lambda: node("goodbye", post_actions=[{"type": "end_conversation"}])  # noqa: E731
    start = node("greeting", functions=[edge("go_to_goodbye", goodbye)])
    run = await pf.run_flow(
        start,
        ["Hello", [("go_to_goodbye", {})], "Bye."],
        [pf.user_says("bye")],
        until=lambda fm: fm.current_node == "goodbye",
    )
    assert run.final_node == "goodbye"
    (handoff,) = handoffs(flows)
    assert check(handoff)[sc.TO_AGENT_NAME] == "goodbye"
    assert children(flows, handoff)[sc.SPAN_POST_ACTIONS].attributes[sc.ACTIONS] == ("end_conversation",)
    assert open_spans.ours() == []


async def test_pipecat_tracing_on_puts_handoffs_in_the_turn(
    flows: Spans, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace

    # Pipecat traces through the global provider: ours, for this test only
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    await tool_transition(enable_tracing=True)
    (handoff,) = handoffs(flows)
    turn = flows.by_id(handoff.parent.span_id)
    assert turn is not None and turn.name == "turn"
    conversation = flows.by_id(turn.parent.span_id)
    assert conversation is not None and conversation.name == "conversation"
    assert flows.named(sc.SPAN_CHAT) == []  # Pipecat's trace is the parent: no root of ours
    assert handoff.context.trace_id == conversation.context.trace_id


@pytest.mark.parametrize("during", [False, True], ids=["after_the_transition", "during_it"])
async def test_what_outlives_pipecats_turn_goes_under_the_conversation(
    flows: Spans, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch, during: bool
) -> None:
    """The bot spoke in the transition's turn (a tts_say pre-action), the new node waits for the
    user, and the user speaks again, after the transition or during it (in a later pre-action):
    Pipecat ends that turn then. What ends after it (first_speech; the handoff too, if during)
    goes under the conversation, linked to the turn, not past its parent's end: Pipecat hands its
    services only the turn's span context, which never says it ended (on CPython 3.12 an EndFrame
    overtaking the bot's speech frame ended the turn first in test_pipecat_tracing_on_...)."""
    from opentelemetry import trace
    from pipecat.frames.frames import (
        BotStartedSpeakingFrame,
        LLMMessagesAppendFrame,
        UserStartedSpeakingFrame,
        UserStoppedSpeakingFrame,
    )

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # Pipecat traces through the global one
    heard, said, third_turn = [0], asyncio.Event(), asyncio.Event()
    workers: list[Any] = []

    def on_worker(worker: Any) -> None:
        workers.append(worker)
        worker.set_reached_upstream_filter((BotStartedSpeakingFrame,))  # the app's own (ours rides it)

        @worker.event_handler("on_frame_reached_upstream")
        async def on_upstream(_: Any, frame: Any) -> None:
            heard[0] += 1
            if heard[0] == 2:  # the greeting's speech, then the tts_say's, reached the source
                said.set()

        @worker.turn_tracking_observer.event_handler("on_turn_started")
        async def on_turn(_: Any, number: int) -> None:
            if number == 3:  # after Pipecat's own handler ended turn 2 (handlers run in order)
                third_turn.set()

    async def speaks_again() -> None:
        await workers[0].queue_frames([UserStartedSpeakingFrame(), UserStoppedSpeakingFrame()])
        await asyncio.wait_for(third_turn.wait(), pf.RUN_TIMEOUT)

    async def said_it(action: dict[str, Any], flow_manager: FlowManager) -> None:
        await said.wait()  # the tts_say's speech is not the new node's first
        if during:
            await speaks_again()

    async def answered(flow_manager: FlowManager, worker: Any) -> None:
        if not during:
            await speaks_again()
        answer = LLMMessagesAppendFrame(messages=[{"role": "user", "content": "yes"}], run_llm=True)
        await worker.queue_frames([answer])  # the model answers only now, in turn 3

    target = lambda: booking(  # noqa: E731
        respond_immediately=False,
        pre_actions=[{"type": "tts_say", "text": SAY_TEXT}, {"type": "said_it", "handler": said_it}],
    )
    await pf.run_flow(
        greeting(target),
        ["Hello", CALL, "Booked."],
        [pf.user_says("book", until=lambda fm: fm.current_node == "booking"), answered],
        until=lambda fm: not fm._llm.replies,
        enable_tracing=True,
        on_worker=on_worker,
    )
    (handoff,) = handoffs(flows)
    (turn,) = [t for t in flows.named("turn") if t.attributes["turn.number"] == 2]
    (conversation,) = flows.named("conversation")
    (speech,) = flows.named(sc.SPAN_FIRST_SPEECH)
    assert handoff.context.trace_id == turn.context.trace_id == speech.context.trace_id
    assert handoff.start_time >= turn.start_time and speech.end_time > turn.end_time  # spoke in turn 3
    if during:
        assert handoff.end_time > turn.end_time
        assert handoff.parent.span_id == conversation.context.span_id
        assert turn.context.span_id in {link.context.span_id for link in handoff.links}
    else:
        assert handoff.end_time <= turn.end_time and handoff.parent.span_id == turn.context.span_id
        assert turn.context.span_id in {link.context.span_id for link in speech.links}
    assert speech.parent.span_id == conversation.context.span_id
    assert handoff.context.span_id in {link.context.span_id for link in speech.links}


async def test_two_transitions_count_up(flows: Spans) -> None:
    back = lambda: node("greeting", functions=[])  # noqa: E731
    target = lambda: node("booking", functions=[edge("back", back)])  # noqa: E731
    # each step waits for its transition and the new node's answer before the next one speaks
    booked = lambda fm: fm.current_node == "booking" and len(fm._llm.replies) == 2  # noqa: E731
    back_again = lambda fm: fm.current_node == "greeting" and not fm._llm.replies  # noqa: E731
    run = await pf.run_flow(
        greeting(target),
        ["Hello", CALL, "Booked.", [("back", {})], "Hello again."],
        [pf.user_says("book", until=booked), pf.user_says("go back", until=back_again)],
        until=back_again,
    )
    assert run.nodes == ["greeting", "booking", "greeting"]
    found = handoffs(flows)
    assert [(s.attributes[sc.FROM_AGENT_NAME], s.attributes[sc.SEQUENCE]) for s in found] == [
        ("greeting", 1),
        ("booking", 2),
    ]


async def test_frames_and_final_node_unchanged(provider: TracerProvider, spans: Spans) -> None:
    plain = await tool_transition()
    instrumentor = PipecatFlowsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        traced = await tool_transition()
    finally:
        instrumentor.uninstrument()
    assert (traced.final_node, traced.frames, traced.unordered_frames) == (
        plain.final_node,
        plain.frames,
        plain.unordered_frames,
    )
    assert "TTSAudioRawFrame" in plain.frames and len(handoffs(spans)) == 1


async def test_uninstrument_restores(provider: TracerProvider, spans: Spans) -> None:
    from pipecat.flows import manager

    names = ["_set_node", "_check_and_execute_transition", "_execute_actions", "_update_llm_context"]
    originals = {name: vars(manager.FlowManager)[name] for name in names}
    instrumentor = PipecatFlowsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    assert all(isinstance(vars(manager.FlowManager)[n], FunctionWrapper) for n in names)
    instrumentor.uninstrument()
    assert {n: vars(manager.FlowManager)[n] for n in names} == originals
    await tool_transition()
    assert handoffs(spans) == []


async def test_metrics_by_phase(flows: Spans, metric_reader: Any) -> None:
    await tool_transition()
    phases: set[str] = set()
    counted = 0
    for resource_metrics in metric_reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for point in metric.data.data_points:
                    if point.attributes.get(sc.FRAMEWORK) != sc.FRAMEWORK_PIPECAT:
                        continue
                    if metric.name == sc.METRIC_DURATION:
                        counted += point.count
                    elif metric.name == sc.METRIC_PHASE_DURATION:
                        phases.add(point.attributes[sc.PHASE])
    # first speech too: every framework records it in the phase metric
    assert counted == 1 and phases == {"handler", "delivery", "context_update", "first_speech"}


async def test_faults_in_our_code_never_reach_the_flow(
    flows: Spans, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("renamed in a future Pipecat")

    monkeypatch.setattr(_transition.FlowState, "emit", broken)
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        run = await tool_transition()
    assert run.final_node == "booking"
    assert sum("internal error" in r.getMessage() for r in caplog.records) == 1


# --- invisible to the app: warnings and the worker ------------------------------------------------
def _fresh_deprecation_sites() -> None:
    """Pipecat warns once per call site per process (pipecat.utils.deprecation, 1.7+): start afresh."""
    try:
        from pipecat.utils import deprecation
    except ImportError:
        return
    getattr(deprecation, "_warned_sites", set()).clear()


def _warnings_of(run: Any) -> list[Warning]:
    """(category, message, filename, line) of every warning ``run()`` raises, nothing filtered."""
    _fresh_deprecation_sites()
    with recorded_warnings() as found:
        run()
    return found


def _legacy_edge(name: str, target: Any) -> FlowsFunctionSchema:
    """A transition whose handler has the deprecated one-argument signature."""

    async def handler(args: dict[str, Any]) -> tuple[Any, Any]:
        return {"status": "ok"}, target()

    return FlowsFunctionSchema(name=name, description=name, properties={}, required=[], handler=handler)


def _deprecated_flow() -> pf.FlowRun:
    """A one-argument handler and RESET_WITH_SUMMARY: Flows' deprecations raised inside calls we wrap."""
    strategy = ContextStrategyConfig(strategy=ContextStrategy.RESET_WITH_SUMMARY, summary_prompt="Summarize.")
    start = node(
        "greeting", functions=[_legacy_edge("go_to_booking", lambda: booking(context_strategy=strategy))]
    )
    return asyncio.run(
        pf.run_flow(
            start,
            ["Hello, how can I help?", [("go_to_booking", {})], "Booked."],
            [pf.user_says(SECRET_WORDS)],
            until=lambda fm: fm.current_node == "booking" and not fm._llm.replies,
        )
    )


def _flow_manager_with_task() -> None:
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker

    worker = PipelineWorker(Pipeline([]))
    FlowManager(task=worker, llm=pf.ScriptedLLM([]), context_aggregator=None)  # the deprecated keyword


@pytest.mark.parametrize("scenario", [_flow_manager_with_task, _deprecated_flow])
def test_deprecation_warnings_keep_their_filename_and_line(
    instrument: Any, spans: Spans, scenario: Any
) -> None:
    """Each of Flows' deprecation warnings names the same file and line with us as without us."""
    plain = _warnings_of(scenario)
    instrumentor = instrument(PipecatFlowsHandoffInstrumentor)
    try:
        traced = _warnings_of(scenario)
    finally:
        instrumentor.uninstrument()
    deprecations = [w for w in plain if w[0] == "DeprecationWarning" and "deprecated" in w[1]]
    assert deprecations, "the scenario raised Flows' deprecation warnings"
    assert traced == plain
    assert not any("otel_handoff" in filename for _, _, filename, _ in traced)


def _observers_and_handlers(worker: Any) -> tuple[list[type], int]:
    observers = [type(o) for o in worker._observer._observers]
    return observers, len(worker._event_handlers["on_pipeline_finished"].handlers)


async def test_uninstrument_takes_our_observer_and_handler_off_the_worker(instrument: Any) -> None:
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker

    from otel_handoff.pipecat import _observer

    plain_worker = PipelineWorker(Pipeline([]))
    FlowManager(worker=plain_worker, llm=pf.ScriptedLLM([]), context_aggregator=None)
    instrumentor = instrument(PipecatFlowsHandoffInstrumentor)
    worker = PipelineWorker(Pipeline([]))
    FlowManager(worker=worker, llm=pf.ScriptedLLM([]), context_aggregator=None)
    assert _observers_and_handlers(worker) != _observers_and_handlers(plain_worker)
    instrumentor.uninstrument()
    await asyncio.gather(*_observer.DETACHING)
    assert _observers_and_handlers(worker) == _observers_and_handlers(plain_worker)


async def test_first_speech_is_watched_only_while_awaited_and_by_no_observer(instrument: Any) -> None:
    """Between transitions nothing of ours is on the worker's frame paths: no observer (which
    would make Pipecat queue every frame push to it), and our source handler and its frame type
    only while a transition awaits the bot's speech; Flows' own sink handler and types untouched."""
    from pipecat.frames.frames import BotStartedSpeakingFrame, BotStoppedSpeakingFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker

    from otel_handoff.pipecat import _observer

    instrument(PipecatFlowsHandoffInstrumentor)
    worker = PipelineWorker(Pipeline([]))
    flow_manager = FlowManager(worker=worker, llm=pf.ScriptedLLM([]), context_aggregator=None)
    worker.add_reached_upstream_filter((BotStoppedSpeakingFrame,))  # the app's own type
    watch = _Flows._telemetry.state(flow_manager).watch

    def on_paths() -> tuple[int, int, set[type], int, set[type]]:
        observers = [o for o in worker._observer._observers if isinstance(o, _observer._FirstSpeech)]
        source = worker._event_handlers["on_frame_reached_upstream"].handlers
        sink = worker._event_handlers["on_frame_reached_downstream"].handlers
        return (
            len(observers),
            len(source),
            set(worker.reached_upstream_types),
            len(sink),
            set(worker.reached_downstream_types),
        )

    between = on_paths()  # the app's upstream type; Flows' own sink handler and types
    assert between[:3] == (0, 0, {BotStoppedSpeakingFrame}) and between[3] == 1
    watch.await_speech()  # a transition ended
    watch.await_speech()
    assert on_paths() == (0, 1, {BotStoppedSpeakingFrame, BotStartedSpeakingFrame}, *between[3:])
    watch.speech_seen()  # the bot spoke in the new node
    assert on_paths() == between


@pytest.mark.parametrize(
    ("direction", "wants_speech"), [("downstream", False), ("upstream", False), ("upstream", True)]
)
async def test_the_apps_own_frame_handler_gets_the_same_frames(
    provider: TracerProvider, spans: Spans, direction: str, wants_speech: bool
) -> None:
    """The app handles ``on_frame_reached_downstream`` or ``_upstream`` itself: its handler gets
    exactly the frames it got without us (where its upstream filter leaves the bot's speech out, an
    observer of ours watches instead), and first speech is still measured."""
    from pipecat.frames.frames import BotStartedSpeakingFrame, BotStoppedSpeakingFrame

    async def run() -> list[str]:
        got: list[str] = []

        def setup(worker: Any) -> None:
            wanted = (
                (BotStoppedSpeakingFrame, BotStartedSpeakingFrame)
                if wants_speech
                else (BotStoppedSpeakingFrame,)
            )
            getattr(worker, f"add_reached_{direction}_filter")(wanted)

            @worker.event_handler(f"on_frame_reached_{direction}")
            async def reached(_: Any, frame: Any) -> None:
                got.append(type(frame).__name__)

        await tool_transition(on_worker=setup)
        return got

    plain = await run()
    instrumentor = PipecatFlowsHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        on_demand = _Flows._telemetry.observer_on_demand
        traced = await run()
    finally:
        instrumentor.uninstrument()
    assert traced == plain and "BotStoppedSpeakingFrame" in plain
    assert ("BotStartedSpeakingFrame" in plain) is wants_speech
    if direction == "upstream" and not wants_speech and not on_demand:  # 1.5: no observer can join now
        assert spans.named(sc.SPAN_FIRST_SPEECH) == []
        return
    (speech,) = spans.named(sc.SPAN_FIRST_SPEECH)
    assert speech.links[0].context.span_id == handoffs(spans)[0].context.span_id


async def test_a_test_double_worker_gets_nothing_of_ours(
    instrument: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Pipecat's own Flows tests (and apps' tests) build a FlowManager on an ``AsyncMock`` worker:
    our calls on it would each leave a coroutine nobody awaits, a RuntimeWarning in their run."""
    import gc
    import warnings
    from unittest.mock import AsyncMock, Mock

    instrument(PipecatFlowsHandoffInstrumentor)
    worker = AsyncMock()  # as Pipecat's tests/flows_test_helpers.py makes it
    worker.set_reached_downstream_filter = Mock()
    worker.event_handler = lambda name: lambda handler: handler
    quiet = caplog.at_level(logging.DEBUG, logger="otel_handoff")
    with warnings.catch_warnings(record=True) as caught, quiet:
        warnings.simplefilter("always")
        FlowManager(worker=worker, llm=pf.ScriptedLLM([]), context_aggregator=None)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("otel_handoff")] == []
    assert worker.add_event_handler.call_count == 0 and worker.add_observer.call_count == 0


class _Recording(pf.NullTransportOutput):
    """Notes, at each write, whether its media sender's start of speech is shadowed (by us)."""

    def __init__(self, app_patch: bool = False) -> None:
        super().__init__()
        self.shadowed: list[bool] = []
        self.app_calls = 0
        self._app_patch = app_patch

    async def set_transport_ready(self, frame: Any) -> None:
        await super().set_transport_ready(frame)
        if self._app_patch:  # the app's own patch of its sender, on the instance
            sender = self._media_senders[None]
            theirs = sender._bot_started_speaking

            async def counted() -> None:
                self.app_calls += 1
                await theirs()

            sender._bot_started_speaking = counted

    async def write_audio_frame(self, frame: Any) -> bool:
        from pipecat.frames.frames import TTSAudioRawFrame

        if not isinstance(frame, TTSAudioRawFrame):  # the silence written at the end
            return await super().write_audio_frame(frame)
        sender = self._media_senders[None]
        # ours: a method bound to the sender, on the instance (the app's is a plain function)
        self.shadowed.append(isinstance(vars(sender).get("_bot_started_speaking"), types.MethodType))
        return await super().write_audio_frame(frame)


@pytest.mark.parametrize("app_patch", [False, True], ids=["plain", "the app's own patch"])
async def test_a_transports_media_sender_carries_ours_only_while_a_transition_awaits_speech(
    flows: Spans, app_patch: bool
) -> None:
    """The media sender starts a run of speech on every audio chunk it writes: nothing of ours is
    on it (nor on its class) but from a transition's end until the new node's first speech, which
    ends at that sender's start of the run; then the sender is as before, the app's patch too."""
    from pipecat.transports.base_output import BaseOutputTransport

    from otel_handoff.pipecat import _downlink

    sender_class = vars(BaseOutputTransport.MediaSender)
    assert not any(
        isinstance(sender_class[n], FunctionWrapper)
        for n in ("_bot_started_speaking", "_bot_stopped_speaking")
    )
    transport = _Recording(app_patch)
    await tool_transition(output=pf.SpeakerOutput(speaks=False), transport=transport)
    (handoff,) = handoffs(flows)
    (speech,) = flows.named(sc.SPAN_FIRST_SPEECH)
    # the greeting's chunks, then the new node's: ours from its first, until the first speech is
    # seen, and never again. (How many of its chunks are written before the speech's frame reaches
    # the worker's source is the event loop's: one on CPython 3.11, all four on 3.12.)
    greeting = transport.shadowed.index(True)
    assert greeting >= 2 and not any(transport.shadowed[:greeting])
    held = transport.shadowed[greeting:]
    assert held == sorted(held, reverse=True)  # True, then only False
    assert speech.end_time == _downlink._SPEECH_STARTED[transport] > handoff.end_time
    sender = transport._media_senders[None]
    assert {"_bot_started_speaking", "_bot_stopped_speaking"} & set(vars(sender)) == (
        {"_bot_started_speaking"} if app_patch else set()
    )
    if app_patch:  # still the app's, and called on every chunk, ours or not
        assert sender._bot_started_speaking.__name__ == "counted"
        assert transport.app_calls == len(transport.shadowed)


def test_a_sender_waited_on_twice_is_ours_until_both_waits_end_and_never_after_uninstrument(
    instrument: Any,
) -> None:
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineWorker
    from pipecat.transports.base_output import BaseOutputTransport

    from otel_handoff.pipecat import _output

    instrumentor = instrument(PipecatFlowsHandoffInstrumentor)
    transport = pf.NullTransportOutput()
    sender = BaseOutputTransport.MediaSender(
        transport,
        destination=None,
        sample_rate=pf.SAMPLE_RATE,
        audio_chunk_size=640,
        params=transport._params,
    )
    transport._media_senders[None] = sender
    worker = PipelineWorker(Pipeline([transport]))
    assert _output.hold(worker, _output.SPEECH_STARTED) is None  # its transport was never ready
    _output._ready(transport)  # as our set_transport_ready wrapper notes it
    names = {_output.SPEECH_STARTED, _output.SPEECH_STOPPED}
    first, second = _output.hold(worker, _output.SPEECH_STARTED), _output.hold(worker, _output.SPEECH_STARTED)
    assert names & set(vars(sender)) == {_output.SPEECH_STARTED}
    first.release()
    first.release()  # once only
    assert names & set(vars(sender)) == {_output.SPEECH_STARTED}
    second.release()
    assert names & set(vars(sender)) == set()
    _output.hold(worker, _output.SPEECH_STOPPED)
    instrumentor.uninstrument()
    assert names & set(vars(sender)) == set() and _output.hold(worker, _output.SPEECH_STARTED) is None
