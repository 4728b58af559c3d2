"""Pipecat's multi-agent workers run offline: real workers on a real bus, scripted edges.

Used by ``otel-handoff demo --framework pipecat`` and by the tests. The topology is Pipecat's own
examples': a ``session`` worker holds the transport (here :class:`PlayingOutput`, which plays
as a real one does) and the shared context, with a ``BusBridgeProcessor`` where the model would be; the
agents are ``LLMWorker`` pipelines (model and TTS) bridged onto the bus, one active at a time. A
handoff is an ``@tool`` that calls ``activate_worker(target, deactivate_self=True)``. Everything
between is Pipecat's: the bus and its messages, the edges, the drain, the aggregators (which hold
the new agent's first model call until the old agent's audio stops, pipecat-ai 1.13 and later).
Only the model, the TTS and the output stage are scripted (``pipecat_flows``'s).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipecat.bus import WorkerBus
from pipecat.bus.bridge_processor import BusBridgeProcessor
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    Frame,
    FunctionCallFromLLM,
    FunctionCallResultProperties,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
    SystemFrame,
    TTSAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.llm import LLMWorker, LLMWorkerActivationArgs, tool
from pipecat.workers.runner import WorkerRunner

from .pipecat_flows import RUN_TIMEOUT, SAMPLE_RATE, Progress, ScriptedLLM, SilentTTS, SpeakerOutput

# (text, [(function, arguments), ...]): what the model says, then the calls it makes
Turn = tuple[str, Sequence[tuple[str, dict[str, Any]]]]


class TalkingLLM(ScriptedLLM):
    """A scripted model whose turn can speak and then call functions in one response."""

    async def _answer(self, context: LLMContext) -> bool:
        reply = self.replies.pop(0) if self.replies else ""
        text, calls = (reply, ()) if isinstance(reply, str) else reply
        if text:
            await self.push_frame(LLMTextFrame(text))
        if calls:
            await self.run_function_calls(
                [
                    FunctionCallFromLLM(
                        function_name=name,
                        tool_call_id=f"call_{uuid.uuid4().hex[:8]}",
                        arguments=arguments,
                        context=context,
                    )
                    for name, arguments in calls
                ]
            )
        return bool(text)


class PlayingOutput(SpeakerOutput):
    """Stands in for ``transport.output()`` as a transport plays: audio passes on at once and plays
    in real time in a task of its own, the bot speaking from a run's first audio until its queue is
    empty. A flush passes while the old audio still plays: a real transport's output holds it behind
    the audio instead (docs/pipecat.md, a real call), so the demo's wait for the old audio comes after
    the setup, a real call's before the drain's rest."""

    def __init__(self, realtime: bool = True) -> None:
        super().__init__(paced=False)
        self.realtime = realtime  # False: each frame "plays" in one turn of the loop (a bench's)
        self.speaking = False
        self._queued: asyncio.Queue[float] = asyncio.Queue()
        self._player: asyncio.Task[None] | None = None

    async def process_frame(self, frame: Frame, direction: Any) -> None:
        await FrameProcessor.process_frame(self, frame, direction)
        if isinstance(frame, SystemFrame) or direction == FrameDirection.UPSTREAM:
            self.unordered.add(len(self.seen))
        self.seen.append(type(frame).__name__)
        if isinstance(frame, InputAudioRawFrame):
            self.audio_in += 1
        if isinstance(frame, LLMFullResponseEndFrame):
            self.ends.add(id(frame))
        if isinstance(frame, TTSAudioRawFrame):
            if self._player is None:
                self._player = asyncio.get_running_loop().create_task(self._play())
            if not self.speaking:
                self.speaking = True
                await self.broadcast_frame(BotStartedSpeakingFrame)
            self._queued.put_nowait(len(frame.audio) / 2 / SAMPLE_RATE)
        if isinstance(frame, EndFrame) and self._player is not None:
            self._player.cancel()
        await self.push_frame(frame, direction)
        self.progress.moved()

    async def _play(self) -> None:
        while True:
            seconds = await self._queued.get()
            await asyncio.sleep(seconds if self.realtime else 0)
            if self._queued.empty():
                self.speaking = False
                await self.broadcast_frame(BotStoppedSpeakingFrame)
                self.progress.moved()


class Agent(LLMWorker):
    """An agent of the examples: its model and TTS bridged onto the bus, ``transfer_to`` its tool."""

    def __init__(
        self, name: str, replies: Sequence[Any], *, active: bool = False, progress: Progress
    ) -> None:
        self.model = TalkingLLM(replies)
        self.model.progress = progress
        super().__init__(
            name, llm=self.model, pipeline=Pipeline([self.model, SilentTTS()]), active=active, bridged=()
        )
        self.activations = 0
        self.on_drain: Callable[[], Awaitable[Any]] | None = None  # the caller speaks as it drains

    async def flush_pipeline(self, timeout: float = 5.0) -> bool:
        on_drain, self.on_drain = self.on_drain, None
        if on_drain is not None:
            await on_drain()
        return await super().flush_pipeline(timeout)

    async def on_activated(self, args: dict | None) -> None:
        self.activations += 1
        await super().on_activated(args)

    @tool(cancel_on_interruption=False)
    async def transfer_to(self, params: Any, agent: str) -> None:
        """Hand the caller to another agent.

        Args:
            agent: The agent to hand the caller to.
        """
        await self._transfer(params, agent)

    @tool
    async def transfer_now(self, params: Any, agent: str) -> None:
        """Hand the caller to another agent (cancelled if the caller speaks meanwhile).

        Args:
            agent: The agent to hand the caller to.
        """
        await self._transfer(params, agent)

    async def _transfer(self, params: Any, agent: str) -> None:
        await params.result_callback(
            {"transferred_to": agent}, properties=FunctionCallResultProperties(run_llm=False)
        )
        await self.activate_worker(
            agent,
            args=LLMWorkerActivationArgs(messages=[{"role": "developer", "content": f"You are {agent}."}]),
            deactivate_self=True,
        )


@dataclass
class WorkersRun:
    """What Pipecat itself did: which agents ended active, their activations, the output's frames
    (as ``pipecat_flows.FlowRun``: the downstream data and control frames in order, the others sorted)."""

    active: dict[str, bool] = field(default_factory=dict)
    activations: dict[str, int] = field(default_factory=dict)
    frames: list[str] = field(default_factory=list)
    unordered_frames: list[str] = field(default_factory=list)


def session_worker(bus: WorkerBus, output: SpeakerOutput, name: str = "session") -> PipelineWorker:
    """The transport's worker: the shared context, the bridge to the agents, the output."""
    aggregators = LLMContextAggregatorPair(LLMContext())
    pipeline = Pipeline(
        [aggregators.user(), BusBridgeProcessor(bus=bus, worker_name=name), output, aggregators.assistant()]
    )
    return PipelineWorker(pipeline, name=name, params=PipelineParams(), cancel_on_idle_timeout=False)


async def user_says(session: PipelineWorker, text: str) -> None:
    await session.queue_frames(
        [
            UserStartedSpeakingFrame(),
            UserStoppedSpeakingFrame(),
            LLMMessagesAppendFrame(messages=[{"role": "user", "content": text}], run_llm=True),
        ]
    )


async def run_workers(
    agents: dict[str, Sequence[Any]],
    says: Sequence[str],
    *,
    first: str = "triage",
    until_active: str | None = None,
    settle: bool = True,
    then: Callable[[PipelineWorker, PlayingOutput], Awaitable[Any]] | None = None,
    interrupt_drain: bool = False,
    realtime: bool = True,
    until_all_said: bool = False,
) -> WorkersRun:
    """One conversation on an ``AsyncQueueBus``: ``first`` active, the user saying ``says`` (each
    once the bot is quiet again), until ``until_active`` has answered and the bot is quiet again
    (``settle=False``: until it answered; two agents left active answer each other for ever); then
    ``then(session, output)``, if given. ``interrupt_drain``: the caller interrupts as ``first``
    starts draining to hand over. ``realtime=False``: the output plays without waiting (a bench).
    ``until_all_said``: until every agent has given every scripted answer."""
    progress = Progress()
    runner = WorkerRunner(handle_sigint=False)
    output = PlayingOutput(realtime)
    output.progress = progress
    session = session_worker(runner.bus, output)
    workers = {
        name: Agent(name, replies, active=name == first, progress=progress)
        for name, replies in agents.items()
    }
    started = asyncio.Event()
    if interrupt_drain:

        async def interrupt() -> None:
            await session.queue_frame(InterruptionFrame())
            await asyncio.Event().wait()  # until the interruption cancels the tool call (its task)

        workers[first].on_drain = interrupt

    @session.event_handler("on_pipeline_started")
    async def _started(*_: Any) -> None:
        started.set()

    await runner.add_workers(session, *workers.values())
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(started.wait(), RUN_TIMEOUT)
        await progress.until(lambda: all(w._started_at for w in workers.values()), "the agents never started")
        for i, text in enumerate(says):
            answered = sum(w.model.answered for w in workers.values())
            await user_says(session, text)
            await progress.until(
                lambda a=answered: sum(w.model.answered for w in workers.values()) > a, "nobody answered"
            )
            if settle or i < len(says) - 1:
                await _quiet(output)
        if until_active is not None:
            target = workers[until_active]
            await progress.until(lambda: target.model.answered > 0, f"{until_active} never answered")
        if until_all_said:
            await progress.until(lambda: not any(w.model.replies for w in workers.values()), "answers left")
        if settle:  # every spoken answer's audio out (its TTSStoppedFrame), the bot quiet again
            spoken = lambda: sum(len(w.model.spoken_ends) for w in workers.values())  # noqa: E731
            await progress.until(
                lambda: output.seen.count("TTSStoppedFrame") >= spoken(), "an answer never came out"
            )
            await _quiet(output)
        if then is not None:
            await then(session, output)
        return WorkersRun(
            active={name: w.active for name, w in workers.items()},
            activations={name: w.activations for name, w in workers.items()},
            frames=[name for i, name in enumerate(output.seen) if i not in output.unordered],
            unordered_frames=sorted(name for i, name in enumerate(output.seen) if i in output.unordered),
        )
    finally:
        await session.queue_frame(EndFrame())
        await runner.end()
        await asyncio.wait_for(running, RUN_TIMEOUT)


async def _quiet(output: PlayingOutput) -> None:
    await output.progress.until(
        lambda: (
            output.seen.count("TTSStartedFrame") == output.seen.count("TTSStoppedFrame")
            and not output.speaking
        ),
        "the bot never stopped speaking",
    )
