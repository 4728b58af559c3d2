"""Pipecat Flows run offline: a real ``PipelineWorker`` and context aggregator, scripted edges.

Used by ``otel-handoff demo --framework pipecat`` and by the tests. Between the user and the
bot everything is Pipecat's own: the aggregators, the function-call machinery, Flows' transitions
and actions. Only the edges are scripted: the model answers each context from a script (a text,
or function calls), the TTS makes silence of a length proportional to the text, and the output
stage emits the bot started/stopped speaking frames a transport would (optionally in real time).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat.flows import FlowManager
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, TTSSettings
from pipecat.services.tts_service import TTSService
from pipecat.workers.runner import WorkerRunner

# a flow that does not end within this is a broken scenario: fail instead of hanging
RUN_TIMEOUT = 30.0
SAMPLE_RATE = 16000

# (text) or (function name, arguments) calls: one entry per model turn
Reply = str | Sequence[tuple[str, dict[str, Any]]]


class ScriptedLLM(LLMService):
    """Answers each context with the next scripted reply; ``run_inference`` makes summaries."""

    def __init__(self, replies: Sequence[Reply], summary_delay: float = 0.0, summary: str = "") -> None:
        super().__init__(
            settings=LLMSettings(
                model="scripted",
                system_instruction=None,
                temperature=None,
                max_tokens=None,
                top_p=None,
                top_k=None,
                frequency_penalty=None,
                presence_penalty=None,
                seed=None,
                filter_incomplete_user_turns=None,
                user_turn_completion_config=None,
            )
        )
        self.replies = list(replies)
        self.responses = 0  # answers pushed (each ends with an LLMFullResponseEndFrame)
        self.summary_delay = summary_delay
        self.summary = summary

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            await self._answer(frame.context)
            self.responses += 1
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)

    async def _answer(self, context: LLMContext) -> None:
        reply = self.replies.pop(0) if self.replies else ""
        if isinstance(reply, str):
            if reply:
                await self.push_frame(LLMTextFrame(reply))
            return
        await self.run_function_calls(
            [
                FunctionCallFromLLM(
                    function_name=name,
                    tool_call_id=f"call_{uuid.uuid4().hex[:8]}",
                    arguments=arguments,
                    context=context,
                )
                for name, arguments in reply
            ]
        )

    async def run_inference(self, context: Any, *args: Any, **kwargs: Any) -> str:  # RESET_WITH_SUMMARY
        await asyncio.sleep(self.summary_delay)
        return self.summary


class SilentTTS(TTSService):
    """Silence, 20 ms per character of text (so a paced output takes time to play it)."""

    def __init__(self) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            push_text_frames=False,
            sample_rate=SAMPLE_RATE,
            settings=TTSSettings(model=None, voice=None, language=None),
        )

    def can_generate_metrics(self) -> bool:
        return False

    async def run_tts(self, text: str, context_id: str):  # type: ignore[override]
        samples = int(SAMPLE_RATE * 0.02 * max(len(text), 1))
        yield TTSAudioRawFrame(
            audio=b"\x00\x00" * samples, sample_rate=SAMPLE_RATE, num_channels=1, context_id=context_id
        )


class SpeakerOutput(FrameProcessor):
    """Stands in for ``transport.output()``: bot speaking frames, audio played in real time if paced."""

    def __init__(self, paced: bool = False) -> None:
        super().__init__()
        self.paced = paced
        self.seen: list[str] = []  # the frame types this stage saw, in order

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await super().process_frame(frame, direction)
        self.seen.append(type(frame).__name__)
        if isinstance(frame, TTSStartedFrame):
            await self.broadcast_frame(BotStartedSpeakingFrame)
        elif isinstance(frame, TTSAudioRawFrame) and self.paced:
            await asyncio.sleep(len(frame.audio) / 2 / SAMPLE_RATE)
        await self.push_frame(frame, direction)
        if isinstance(frame, TTSStoppedFrame):
            await self.broadcast_frame(BotStoppedSpeakingFrame)


@dataclass
class FlowRun:
    """What Pipecat itself did: the nodes it went through and the frames the output saw."""

    nodes: list[str | None] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    final_node: str | None = None


Step = Callable[[FlowManager, PipelineWorker], Awaitable[None]]


def user_says(text: str) -> Step:
    async def step(flow_manager: FlowManager, worker: PipelineWorker) -> None:
        await worker.queue_frames(
            [
                UserStartedSpeakingFrame(),
                UserStoppedSpeakingFrame(),
                LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True),
            ]
        )

    return step


async def run_flow(
    initial_node: dict[str, Any],
    replies: Sequence[Reply],
    steps: Sequence[Step],
    *,
    until: Callable[[FlowManager], bool],
    enable_tracing: bool = False,
    paced: bool = False,
    summary_delay: float = 0.0,
    summary: str = "",
) -> FlowRun:
    """Run a flow: initialize at ``initial_node``, take ``steps``, stop once ``until`` holds.

    Waits on Pipecat's own events (the pipeline started, a node was set, the output fell
    silent), never on a guessed time; ``RUN_TIMEOUT`` only bounds a broken scenario.
    """
    llm = ScriptedLLM(replies, summary_delay=summary_delay, summary=summary)
    output = SpeakerOutput(paced=paced)
    aggregators = LLMContextAggregatorPair(LLMContext())
    pipeline = Pipeline([aggregators.user(), llm, SilentTTS(), output, aggregators.assistant()])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(),
        enable_tracing=enable_tracing,
        conversation_id=f"offline-{uuid.uuid4().hex[:8]}" if enable_tracing else None,
        cancel_on_idle_timeout=False,
    )
    flow_manager = FlowManager(worker=worker, llm=llm, context_aggregator=aggregators)
    run = FlowRun()
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(*_: Any) -> None:
        started.set()

    async def drive() -> None:
        try:
            await asyncio.wait_for(started.wait(), RUN_TIMEOUT)
            await flow_manager.initialize(initial_node)
            run.nodes.append(flow_manager.current_node)
            for step in steps:
                await _quiet(output)
                await step(flow_manager, worker)
                await _settled(flow_manager, output)
                run.nodes.append(flow_manager.current_node)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + RUN_TIMEOUT
            while not until(flow_manager):
                if loop.time() > deadline:
                    raise TimeoutError(f"the flow did not reach its end (at {flow_manager.current_node})")
                await asyncio.sleep(0.005)
            await _quiet(output, llm)
        finally:
            run.final_node = flow_manager.current_node
            await worker.queue_frame(EndFrame())  # always: a raising driver otherwise hangs the runner

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await drive()
    finally:  # the EndFrame is queued: the pipeline ends, whether the scenario held or not
        await asyncio.wait_for(running, RUN_TIMEOUT)
    run.frames = output.seen
    return run


async def node_reached(flow_manager: FlowManager, name: str) -> None:
    """Until the flow is at node ``name`` (bounded: a broken scenario fails, never hangs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_TIMEOUT
    while flow_manager.current_node != name:
        if loop.time() > deadline:
            raise TimeoutError(f"the flow never reached {name} (at {flow_manager.current_node})")
        await asyncio.sleep(0.005)


async def _quiet(output: SpeakerOutput, llm: ScriptedLLM | None = None) -> None:
    """Until every answer the model gave has reached the output and the bot is not speaking."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_TIMEOUT
    answered = llm.responses if llm is not None else 0
    while (
        output.seen.count("TTSStartedFrame") != output.seen.count("TTSStoppedFrame")
        or output.seen.count("LLMFullResponseEndFrame") < answered
    ):
        if loop.time() > deadline:
            raise TimeoutError("the bot never stopped speaking")
        await asyncio.sleep(0.005)


async def _settled(flow_manager: FlowManager, output: SpeakerOutput) -> None:
    """Until the bot has answered (or stayed silent) after the step and no function call runs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RUN_TIMEOUT
    seen = len(output.seen)
    assistant = flow_manager._context_aggregator.assistant()
    while len(output.seen) == seen or assistant.has_function_calls_in_progress:
        if loop.time() > deadline:
            raise TimeoutError("the flow did not settle after the step")
        await asyncio.sleep(0.005)
    await _quiet(output)
