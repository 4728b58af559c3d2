"""Google ADK offline: the real ``Runner``, agents and flows; only the model edges are scripted.

- text: :class:`ScriptedLlm`, a ``BaseLlm`` answering from a script after a set latency;
- live: :class:`ScriptedLiveLlm`, whose ``connect()`` opens a :class:`ScriptedConnection` after a
  set delay (the Live API's websocket and setup) and which, like google-genai's session, yields
  one model turn per ``receive()`` and nothing once closed.

The delays are assumptions standing in for the network and the model; everything between them
(the transfer tool, ADK's fixed transfer delay, the new agent's setup) is ADK's own code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.live_request_queue import LiveRequestQueue
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models.base_llm import BaseLlm
from google.adk.models.base_llm_connection import BaseLlmConnection
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

APP = "otel-handoff-offline"
USER = "caller-1"
CHUNK = b"\x00" * 960  # 20 ms of 24 kHz 16-bit mono PCM
# ADK's own notices about our scripted setup (no context cache, no token counts): not the demo's
_ADK_NOTICES = ("google_adk.google.adk.runners", "google_adk.google.adk.telemetry._metrics")


def usage() -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=20, candidates_token_count=5, total_token_count=25
    )


def transfer_call(target: str, call_id: str = "call-transfer-1", reason: str | None = None) -> LlmResponse:
    """The model asks for a transfer, as Gemini does: a ``transfer_to_agent`` function call (with
    the model-written ``transfer_reason`` ADK accepts, if given)."""
    args = {"agent_name": target} if reason is None else {"agent_name": target, "transfer_reason": reason}
    call = types.FunctionCall(id=call_id, name="transfer_to_agent", args=args)
    content = types.Content(role="model", parts=[types.Part(function_call=call)])
    return LlmResponse(content=content, usage_metadata=usage())


def reply(text: str) -> LlmResponse:
    content = types.Content(role="model", parts=[types.Part(text=text)])
    return LlmResponse(content=content, usage_metadata=usage())


def audio() -> LlmResponse:
    blob = types.Blob(mime_type="audio/pcm;rate=24000", data=CHUNK)
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(inline_data=blob)]))


class ScriptedLlm(BaseLlm):
    """A text model answering from ``script``, one response per call, after ``latency`` seconds."""

    script: list[Any]
    latency: float = 0.05

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncIterator[Any]:
        await asyncio.sleep(self.latency)
        answer = self.script.pop(0)
        for response in answer if isinstance(answer, list) else [answer]:  # a list: streamed
            yield response


def streamed_reply(chunks: int, word: str = "ok ") -> list[LlmResponse]:
    """A streamed answer: ``chunks`` partial responses (SSE mode), then the whole text."""
    partial = [
        LlmResponse(content=types.Content(role="model", parts=[types.Part(text=word)]), partial=True)
        for _ in range(chunks)
    ]
    return [*partial, reply(word * chunks)]


def slow_instruction(text: str, delay: float) -> Callable[[Any], Awaitable[str]]:
    """An async instruction provider (a database or prompt-store lookup): ADK awaits it in setup."""

    async def provider(context: Any) -> str:
        await asyncio.sleep(delay)
        return text

    return provider


def text_agents(
    *,
    target: str = "billing",
    triage_latency: float = 0.05,
    billing_latency: float = 0.12,
    instructions_delay: float = 0.02,
    reason: str | None = None,
) -> LlmAgent:
    """triage (transfers to ``target``) with billing as its sub-agent."""
    billing = LlmAgent(
        name="billing",
        description="Answers billing questions.",
        model=ScriptedLlm(
            model="scripted-billing", script=[reply("Your last invoice was paid.")], latency=billing_latency
        ),
        instruction=slow_instruction("You are billing.", instructions_delay),
    )
    return LlmAgent(
        name="triage",
        description="Routes the customer.",
        model=ScriptedLlm(
            model="scripted-triage", script=[transfer_call(target, reason=reason)], latency=triage_latency
        ),
        instruction="You are triage.",
        sub_agents=[billing],
    )


@dataclass
class RunResult:
    """What the app saw of a run: its events, and what the session stored."""

    session_id: str
    events: list[Any] = field(default_factory=list)
    stored: list[Any] = field(default_factory=list)
    error: BaseException | None = None


def message(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run_text(
    root: Any,
    *,
    streaming: bool = False,
    consumer_delay: float = 0.0,
    session_id: str | None = None,
    text: str = "Why was I charged twice?",
) -> RunResult:
    """One ``run_async`` turn, the app's loop taking ``consumer_delay`` seconds per event
    (``streaming``: SSE mode, partial responses reach the app as events too)."""
    with quiet_adk_notices():
        runner = InMemoryRunner(agent=root, app_name=APP)
        session = await runner.session_service.create_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        result = RunResult(session.id)
        try:
            config = RunConfig(streaming_mode=StreamingMode.SSE) if streaming else None
            async for event in runner.run_async(
                user_id=USER, session_id=session.id, new_message=message(text), run_config=config
            ):
                result.events.append(event)
                if consumer_delay:
                    await asyncio.sleep(consumer_delay)  # e.g. the app writes the event to its own store
        except Exception as exc:
            result.error = exc
        stored = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        result.stored = list(stored.events) if stored is not None else []
        await runner.close()
    return result


@contextlib.contextmanager
def quiet_adk_notices() -> Any:
    """ADK's notices about the scripted setup, silenced while it runs (restored after)."""
    loggers = [logging.getLogger(name) for name in _ADK_NOTICES]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# --- live ----------------------------------------------------------------------------------------

Scenario = Callable[["ScriptedConnection", str, Any], Awaitable[None]]


class ScriptedConnection(BaseLlmConnection):
    """One live connection of a scripted model: one model turn per ``receive()`` call."""

    def __init__(self, on_input: Scenario) -> None:
        self._on_input = on_input
        self._out: asyncio.Queue[LlmResponse] = asyncio.Queue()
        self._closed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def later(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def emit(self, response: LlmResponse, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        if not self._closed.is_set():
            await self._out.put(response)

    async def send_history(self, history: list[types.Content]) -> None:
        await self._on_input(self, "history", history)

    async def send_content(self, content: types.Content) -> None:
        await self._on_input(self, "content", content)

    async def send_realtime(self, blob: Any) -> None:
        pass

    async def receive(self) -> AsyncIterator[LlmResponse]:
        while not self._closed.is_set():
            getter = asyncio.ensure_future(self._out.get())
            closer = asyncio.ensure_future(self._closed.wait())
            await asyncio.wait({getter, closer}, return_when=asyncio.FIRST_COMPLETED)
            closer.cancel()
            if not getter.done():
                getter.cancel()
                return
            response = getter.result()
            yield response
            if response.turn_complete:
                return

    async def close(self) -> None:
        self._closed.set()
        for task in list(self._tasks):
            task.cancel()


class ScriptedLiveLlm(BaseLlm):
    """A live model: ``connect()`` takes ``connect_delay`` seconds, then talks per ``scenario``."""

    scenario: Any = None
    connect_delay: float = 0.15

    @contextlib.asynccontextmanager
    async def connect(self, llm_request: Any) -> AsyncIterator[ScriptedConnection]:
        await asyncio.sleep(self.connect_delay)
        yield ScriptedConnection(self.scenario)

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> AsyncIterator[Any]:
        raise NotImplementedError("live only")
        yield  # pragma: no cover


def live_triage(target: str | None = "billing", chunks: int = 3, spacing: float = 0.02) -> Scenario:
    """Triage says a few words (``chunks`` of audio), then asks for a transfer (or, without a
    ``target``, ends its turn)."""

    async def scenario(connection: ScriptedConnection, kind: str, payload: Any) -> None:
        if kind == "content" and payload.parts and payload.parts[0].text:
            for _ in range(chunks):
                await connection.emit(audio(), spacing)
            if target is None:
                await connection.emit(LlmResponse(turn_complete=True), spacing)
                return
            call = types.FunctionCall(
                id="call-transfer-1", name="transfer_to_agent", args={"agent_name": target}
            )
            content = types.Content(role="model", parts=[types.Part(function_call=call)])
            await connection.emit(LlmResponse(content=content), 0.05)

    return scenario


def live_billing(first_audio_delay: float = 0.35, chunks: int = 4, spacing: float = 0.02) -> Scenario:
    """The new agent speaks first: the replayed history ends with the transfer's response."""

    async def scenario(connection: ScriptedConnection, kind: str, payload: Any) -> None:
        if kind == "history" and payload and payload[-1].role == "user":

            async def speak() -> None:
                await connection.emit(audio(), first_audio_delay)
                for _ in range(chunks - 1):
                    await connection.emit(audio(), spacing)
                await connection.emit(LlmResponse(turn_complete=True), spacing)

            connection.later(speak())

    return scenario


def live_agents(
    *,
    target: str = "billing",
    connect_delay: float = 0.15,
    first_audio_delay: float = 0.35,
    billing_speaks: bool = True,
    triage_chunks: int = 3,
    billing_chunks: int = 4,
    spacing: float = 0.02,
) -> LlmAgent:
    """triage (a live model) with billing as its sub-agent; ``target`` None: triage only talks."""

    async def silent(connection: ScriptedConnection, kind: str, payload: Any) -> None:
        return None

    billing = LlmAgent(
        name="billing",
        description="Answers billing questions.",
        instruction="You are billing.",
        model=ScriptedLiveLlm(
            model="live-billing",
            scenario=live_billing(first_audio_delay, billing_chunks, spacing) if billing_speaks else silent,
            connect_delay=connect_delay,
        ),
    )
    return LlmAgent(
        name="triage",
        description="Routes the caller.",
        instruction="You are triage.",
        model=ScriptedLiveLlm(
            model="live-triage",
            scenario=live_triage(target, triage_chunks, spacing),
            connect_delay=connect_delay,
        ),
        sub_agents=[billing],
    )


async def run_live(
    root: Any,
    *,
    session_id: str | None = None,
    hang_up_on_transfer: bool = False,
    until_turn_of: str = "billing",
) -> RunResult:
    """One live session: the caller asks, and hangs up when ``until_turn_of``'s turn completes (or,
    with ``hang_up_on_transfer``, as soon as the transfer's event arrives)."""
    with quiet_adk_notices():
        runner = InMemoryRunner(agent=root, app_name=APP)
        session = await runner.session_service.create_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        result = RunResult(session.id)
        queue = LiveRequestQueue()
        queue.send_content(message("I have a billing question"))
        config = RunConfig(
            response_modalities=["AUDIO"],
            input_audio_transcription=types.AudioTranscriptionConfig(),
            output_audio_transcription=types.AudioTranscriptionConfig(),
        )
        events = runner.run_live(
            user_id=USER, session_id=session.id, live_request_queue=queue, run_config=config
        )
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    result.events.append(event)
                    hang_up = hang_up_on_transfer and event.actions.transfer_to_agent
                    if hang_up or (event.turn_complete and event.author == until_turn_of):
                        queue.close()  # the caller hangs up
                        break
        except Exception as exc:
            result.error = exc
        stored = await runner.session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        result.stored = list(stored.events) if stored is not None else []
        await runner.close()
    return result
