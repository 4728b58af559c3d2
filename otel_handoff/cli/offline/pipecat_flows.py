"""Pipecat Flows run offline: a real ``PipelineWorker`` and context aggregator, scripted edges.

Used by ``otel-handoff demo --framework pipecat`` and by the tests. Between the user and the
bot everything is Pipecat's own: the aggregators, the function-call machinery, Flows' transitions
and actions. Only the edges are scripted: the model answers each context from a script (a text,
or function calls), the TTS makes silence of a length proportional to the text, and the output
stage emits the bot started/stopped speaking frames a transport would (optionally in real time).
"""

from __future__ import annotations

import asyncio
import contextvars
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
    InputAudioRawFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    StartFrame,
    SystemFrame,
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
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, TTSSettings
from pipecat.services.tts_service import TTSService
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner

# a flow that does not end within this is a broken scenario: fail instead of hanging
RUN_TIMEOUT = 30.0
SAMPLE_RATE = 16000

# (text) or (function name, arguments) calls: one entry per model turn
Reply = str | Sequence[tuple[str, dict[str, Any]]]


class Progress:
    """Pipecat's state moves only as frames move: the scripted edges say when a frame passed, and a
    wait checks its condition then, never on a timer (so a run does the same work however slow the
    machine, and a bench under ``sys.settrace`` counts no polling)."""

    def __init__(self) -> None:
        self._moved = asyncio.Event()

    def moved(self) -> None:
        self._moved.set()

    async def until(self, condition: Callable[[], bool], failure: str) -> None:
        """Until ``condition`` holds; ``RUN_TIMEOUT`` fails a broken scenario with ``failure``."""

        async def wait() -> None:
            while not condition():
                self._moved.clear()
                await self._moved.wait()

        try:
            await asyncio.wait_for(wait(), RUN_TIMEOUT)
        except asyncio.TimeoutError:
            raise TimeoutError(failure) from None


# the running flow's, for the steps' waits (``node_reached``)
_PROGRESS: contextvars.ContextVar[Progress] = contextvars.ContextVar("otel_handoff_offline_pipecat")


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
        # the end frame of each spoken answer: a TTS service holds it until the answer's audio
        # is out (a function-call answer's end frame may never reach the output: pipecat-ai 1.5)
        self.spoken_ends: list[LLMFullResponseEndFrame] = []
        self.answered = 0
        self.summary_delay = summary_delay
        self.summary = summary
        self.progress = Progress()

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            end = LLMFullResponseEndFrame()
            if await self._answer(frame.context):
                self.spoken_ends.append(end)
            await self.push_frame(end)
            self.answered += 1
        else:
            await self.push_frame(frame, direction)
        self.progress.moved()

    async def _answer(self, context: LLMContext) -> bool:
        """Push the next scripted answer; whether it was speech."""
        reply = self.replies.pop(0) if self.replies else ""
        if isinstance(reply, str):
            if reply:
                await self.push_frame(LLMTextFrame(reply))
            return bool(reply)
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
        return False

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


class NullTransportOutput(BaseOutputTransport):
    """A transport's output that writes its audio nowhere: Pipecat's own media sender (the audio
    cut into 40 ms chunks, the bot speaking frames, the audio task), no device or network.
    ``speaking_frames=False``: no ``BotSpeakingFrame``, which the sender sends every 0.2 s of wall
    time while the bot speaks (work per chunk counted with it would count how fast the machine ran)."""

    def __init__(self, speaking_frames: bool = True) -> None:
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=SAMPLE_RATE))
        self.written = 0  # audio chunks written
        self._speaking_frames = speaking_frames

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        if not self._speaking_frames:
            self._media_senders[None]._bot_speaking_frame_period = float("inf")

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        self.written += 1
        return True


class SpeakerOutput(FrameProcessor):
    """Stands in for ``transport.output()``: bot speaking frames, audio played in real time if paced;
    or, behind a :class:`NullTransportOutput` (``speaks=False``), only sees what it wrote."""

    def __init__(self, paced: bool = False, speaks: bool = True) -> None:
        super().__init__()
        self.paced = paced
        self.speaks = speaks
        self.seen: list[str] = []  # the frame types this stage saw, in order
        self.ends: set[int] = set()  # ids of the LLMFullResponseEndFrames that reached it
        self.unordered: set[int] = set()  # indexes into seen of system and upstream frames
        self.audio_in = 0  # the caller's audio frames that passed through
        self.progress = Progress()

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, SystemFrame) or direction == FrameDirection.UPSTREAM:
            self.unordered.add(len(self.seen))
        self.seen.append(type(frame).__name__)
        if isinstance(frame, InputAudioRawFrame):
            self.audio_in += 1
        if isinstance(frame, LLMFullResponseEndFrame):
            self.ends.add(id(frame))
        if isinstance(frame, TTSStartedFrame) and self.speaks:
            await self.broadcast_frame(BotStartedSpeakingFrame)
        elif isinstance(frame, TTSAudioRawFrame) and self.paced:
            await asyncio.sleep(len(frame.audio) / 2 / SAMPLE_RATE)
        await self.push_frame(frame, direction)
        if isinstance(frame, TTSStoppedFrame) and self.speaks:
            await self.broadcast_frame(BotStoppedSpeakingFrame)
        self.progress.moved()


class _Tail(FrameProcessor):
    """The pipeline's last stage: what the assistant aggregator lets through moved the flow too."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        self.progress.moved()


@dataclass
class FlowRun:
    """What Pipecat itself did: the nodes it went through and the frames the output saw.

    System frames jump the queue and upstream frames cross the downstream ones, so only their
    count is the same from run to run, not their place: ``frames`` is the downstream data and
    control frames in order, ``unordered_frames`` the sorted names of the others.
    """

    nodes: list[str | None] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    unordered_frames: list[str] = field(default_factory=list)
    final_node: str | None = None


Step = Callable[[FlowManager, PipelineWorker], Awaitable[None]]


def user_says(text: str, *, until: Callable[[FlowManager], bool] | None = None) -> Step:
    """The user's turn. ``until``: what the step waits for before the next one may speak (the
    model's answers, a transition). The settling after a step sees only frames and function calls,
    not an answer still on its way, so a step whose answer starts a transition names its end here:
    without it, how far Pipecat got before the next step is down to the loop's scheduling (on
    CPython 3.12, whose ``asyncio.wait_for`` runs in the caller's task, the next step's words
    reached the model before its first answer)."""

    async def step(flow_manager: FlowManager, worker: PipelineWorker) -> None:
        await worker.queue_frames(
            [
                UserStartedSpeakingFrame(),
                UserStoppedSpeakingFrame(),
                LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True),
            ]
        )
        if until is not None:
            await _PROGRESS.get().until(lambda: until(flow_manager), "the flow never settled after the step")

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
    output: SpeakerOutput | None = None,
    on_worker: Callable[[PipelineWorker], Any] | None = None,
    transport: NullTransportOutput | None = None,
) -> FlowRun:
    """Run a flow: initialize at ``initial_node``, take ``steps``, stop once ``until`` holds.

    Waits on Pipecat's own events (the pipeline started) and on frames passing the scripted
    stages (``Progress``), never on a guessed time; ``RUN_TIMEOUT`` only bounds a broken scenario.
    ``transport``: a real transport's output before ``output`` (then ``speaks=False``).
    """
    progress = Progress()
    llm = ScriptedLLM(replies, summary_delay=summary_delay, summary=summary)
    output = output if output is not None else SpeakerOutput(paced=paced)
    llm.progress = output.progress = progress
    aggregators = LLMContextAggregatorPair(LLMContext())
    outputs = [output] if transport is None else [transport, output]
    pipeline = Pipeline(
        [aggregators.user(), llm, SilentTTS(), *outputs, aggregators.assistant(), _Tail(progress)]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(),
        enable_tracing=enable_tracing,
        conversation_id=f"offline-{uuid.uuid4().hex[:8]}" if enable_tracing else None,
        cancel_on_idle_timeout=False,
    )
    flow_manager = FlowManager(worker=worker, llm=llm, context_aggregator=aggregators)
    if on_worker is not None:  # the app's own setup of its worker (event handlers, filters)
        on_worker(worker)
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
            if initial_node.get("respond_immediately", True):  # the greeting is answered first
                await progress.until(lambda: llm.answered > 0, "the model never answered the first node")
            for step in steps:
                await _quiet(output, llm)
                await step(flow_manager, worker)
                await _settled(flow_manager, output, llm)
                run.nodes.append(flow_manager.current_node)
            await progress.until(lambda: until(flow_manager), "the flow did not reach its end")
            await _quiet(output, llm)
        finally:
            run.final_node = flow_manager.current_node
            await worker.queue_frame(EndFrame())  # always: a raising driver otherwise hangs the runner

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    token = _PROGRESS.set(progress)
    try:
        await drive()
    finally:  # the EndFrame is queued: the pipeline ends, whether the scenario held or not
        _PROGRESS.reset(token)
        await asyncio.wait_for(running, RUN_TIMEOUT)
    run.frames = [name for i, name in enumerate(output.seen) if i not in output.unordered]
    run.unordered_frames = sorted(name for i, name in enumerate(output.seen) if i in output.unordered)
    return run


async def node_reached(flow_manager: FlowManager, name: str) -> None:
    """Until the flow is at node ``name``."""
    await _PROGRESS.get().until(lambda: flow_manager.current_node == name, f"the flow never reached {name}")


async def _quiet(output: SpeakerOutput, llm: ScriptedLLM) -> None:
    """Until every spoken answer has reached the output and the bot is not speaking."""
    await output.progress.until(
        lambda: (
            output.seen.count("TTSStartedFrame") == output.seen.count("TTSStoppedFrame")
            and all(id(end) in output.ends for end in llm.spoken_ends)
        ),
        "the bot never stopped speaking",
    )


async def _settled(flow_manager: FlowManager, output: SpeakerOutput, llm: ScriptedLLM) -> None:
    """Until the bot has answered (or stayed silent) after the step and no function call runs."""
    seen = len(output.seen)
    assistant = flow_manager._context_aggregator.assistant()
    await output.progress.until(
        lambda: len(output.seen) > seen and not assistant.has_function_calls_in_progress,
        "the flow did not settle after the step",
    )
    await _quiet(output, llm)
