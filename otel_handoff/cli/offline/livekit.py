"""Offline model edges for a real LiveKit ``AgentSession``: no room, no server, no keys.

The demo and the tests run the framework's own handoff path end to end; only the model edges
(LLM, STT, realtime model) are replaced, and just enough for handoffs and resource reuse to
happen for real. Works on livekit-agents 1.2.18 … 1.8.9 and 2.0.0b1.

Import this module only when livekit-agents is installed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from livekit import rtc
from livekit.agents import llm, stt, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions

__all__ = [
    "IdleRealtimeModel",
    "IdleRealtimeSession",
    "ScriptedLLM",
    "ScriptedLLMStream",
    "SilentRecognizeStream",
    "SilentSTT",
    "finish_task",
    "settle",
]


async def settle(session: Any) -> None:
    """Wait for the handoff in flight and the new agent's on_enter task (private, but exact); what
    they raise is theirs to report, not the waiter's."""
    if session._update_activity_atask is not None:
        await asyncio.gather(session._update_activity_atask, return_exceptions=True)
    activity = session._activity
    if activity is not None and activity._on_enter_task is not None:
        await asyncio.gather(activity._on_enter_task, return_exceptions=True)


def finish_task(task: Any, value: Any) -> Any:
    """End an ``AgentTask`` from its ``on_enter`` with ``value``; return what on_enter returns.

    1.x: ``task.complete(value)``, and on_enter returns nothing. 2.0 took ``complete()`` away: an
    on_enter returns ``llm.Completed(value)`` and the framework completes the task with it.
    """
    if hasattr(task, "complete"):
        task.complete(value)
        return None
    return llm.Completed(value)


def _tool_name(tool: Any) -> str | None:
    """Name of a tool as offered to ``LLM.chat``, across livekit-agents releases."""
    info = getattr(tool, "info", None)  # tools are objects with ``.info`` from 1.5
    if info is not None:
        return getattr(info, "name", None)
    from livekit.agents.llm import tool_context as tc  # 1.2 to 1.4: decorated functions

    if tc.is_function_tool(tool):
        return tc.get_function_info(tool).name
    if tc.is_raw_function_tool(tool):
        return tc.get_raw_function_info(tool).name
    return None


class ScriptedLLMStream(llm.LLMStream):
    """Emits one scripted chunk: a tool call or a text reply."""

    def __init__(
        self,
        scripted: ScriptedLLM,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[Any],
        conn_options: APIConnectOptions,
        reply: llm.FunctionToolCall | str,
    ) -> None:
        super().__init__(scripted, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._reply = reply

    async def _run(self) -> None:
        if isinstance(self._reply, llm.FunctionToolCall):
            delta = llm.ChoiceDelta(role="assistant", tool_calls=[self._reply])
        else:
            delta = llm.ChoiceDelta(role="assistant", content=self._reply)
        self._event_ch.send_nowait(llm.ChatChunk(id=utils.shortuuid("chunk_"), delta=delta))


class ScriptedLLM(llm.LLM):
    """An LLM that follows a script, so tool-driven handoffs happen deterministically.

    Each ``chat()`` call emits a call to the first tool of ``tool_calls`` that is offered in
    that call and not yet called in its chat context; when there is none it replies ``reply``.
    ``ScriptedLLM(tool_calls=["transfer"])`` therefore transfers once, then talks.

    Tool call ids are ``call_1``, ``call_2``, … in emission order; arguments are always ``"{}"``.
    """

    def __init__(self, tool_calls: Iterable[str] = (), *, reply: str = "ok") -> None:
        super().__init__()
        # a lone name is one tool, not a sequence of one-letter tools
        self.tool_calls: tuple[str, ...] = (tool_calls,) if isinstance(tool_calls, str) else tuple(tool_calls)
        self.reply = reply
        self.calls = 0
        """Number of ``chat()`` calls so far."""
        self.called: list[str] = []
        """Names of the tools called so far, in order."""

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "otel-handoff"

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[Any] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> ScriptedLLMStream:
        self.calls += 1
        tools = list(tools or [])
        offered = {_tool_name(t) for t in tools}
        used = {item.name for item in chat_ctx.items if item.type == "function_call"}
        reply: llm.FunctionToolCall | str = self.reply
        for name in self.tool_calls:
            if name in offered and name not in used:
                self.called.append(name)
                reply = llm.FunctionToolCall(name=name, arguments="{}", call_id=f"call_{len(self.called)}")
                break
        return ScriptedLLMStream(self, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options, reply=reply)


class SilentRecognizeStream(stt.RecognizeStream):
    """Consumes audio and never recognises anything, after a simulated connection."""

    def __init__(self, *, stt: SilentSTT, conn_options: APIConnectOptions, connect_delay: float) -> None:
        super().__init__(stt=stt, conn_options=conn_options)
        self._connect_delay = connect_delay

    async def _run(self) -> None:
        if self._connect_delay > 0:
            started = time.perf_counter()
            await asyncio.sleep(self._connect_delay)  # simulated connection time
            report = getattr(self, "_report_connection_acquired", None)  # livekit-agents 1.5.17+
            if report is not None:
                report(time.perf_counter() - started, False)
        async for _ in self._input_ch:
            pass


class SilentSTT(stt.STT):
    """A streaming STT that hears nothing: enough for the STT pipeline to be reused.

    ``streams`` counts the recognition streams opened; after handoffs between agents that
    share this instance it stays at 1 when the pipeline was reused (livekit-agents ≥ 1.5.3).
    Each stream "connects" for ``connect_delay`` seconds and reports it as ``acquire_time``.
    """

    def __init__(self, *, connect_delay: float = 0.0) -> None:
        super().__init__(capabilities=stt.STTCapabilities(streaming=True, interim_results=False))
        self.streams = 0
        self.connect_delay = connect_delay

    async def _recognize_impl(self, buffer: Any, *, language: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        raise NotImplementedError("SilentSTT only streams")

    def stream(
        self,
        *,
        language: Any = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> SilentRecognizeStream:
        self.streams += 1
        return SilentRecognizeStream(stt=self, conn_options=conn_options, connect_delay=self.connect_delay)


class IdleRealtimeSession(llm.RealtimeSession):
    """A realtime session that keeps its state locally and never generates.

    Like a provider's session it connects in the background on creation (``connect_delay``),
    reporting the connection time through the framework's own ``acquire_time`` metric where
    the release has it; ``update_instructions`` / ``update_chat_ctx`` / ``update_tools`` wait
    for that connection, then ``update_delay``, and raise the model's ``update_errors[kind]``
    if one is scripted (e.g. ``RealtimeError("update_chat_ctx timed out")``).
    """

    def __init__(self, model: IdleRealtimeModel) -> None:
        super().__init__(model)
        self._idle_model = model
        self._connected = asyncio.Event()
        self._connect_task = asyncio.get_running_loop().create_task(self._connect())
        self._chat_ctx = llm.ChatContext.empty()
        self._tools = llm.ToolContext.empty()
        self.updates = 0
        """Number of ``update_*`` calls received."""
        self.closed = False
        self.acquire_time: float | None = None
        """The connection time reported to the framework, if any."""

    async def _connect(self) -> None:
        started = time.perf_counter()
        if self._idle_model.connect_delay > 0:
            await asyncio.sleep(self._idle_model.connect_delay)  # simulated connection time
        self._connected.set()
        report = getattr(self, "_report_connection_acquired", None)  # livekit-agents 1.5.17+
        if report is not None and self._idle_model.connect_delay > 0:
            self.acquire_time = time.perf_counter() - started
            report(self.acquire_time)

    async def _simulate_round_trip(self, kind: str) -> None:
        self.updates += 1
        await self._connected.wait()
        if self._idle_model.update_delay > 0:
            await asyncio.sleep(self._idle_model.update_delay)  # simulated network latency
        error = self._idle_model.update_errors.get(kind)
        if error is not None:
            raise error

    @property
    def chat_ctx(self) -> llm.ChatContext:
        return self._chat_ctx.copy()

    @property
    def tools(self) -> llm.ToolContext:
        return self._tools.copy()

    async def update_instructions(self, instructions: Any) -> None:
        await self._simulate_round_trip("instructions")

    async def update_chat_ctx(self, chat_ctx: llm.ChatContext) -> None:
        await self._simulate_round_trip("chat_ctx")
        self._chat_ctx = chat_ctx.copy()

    async def update_tools(self, tools: list[Any]) -> None:
        await self._simulate_round_trip("tools")
        self._tools = llm.ToolContext(tools)

    def update_options(self, *, tool_choice: Any = NOT_GIVEN, **kwargs: Any) -> None:
        pass

    def push_audio(self, frame: rtc.AudioFrame) -> None:
        pass

    def push_video(self, frame: rtc.VideoFrame) -> None:
        pass

    def generate_reply(self, *, instructions: Any = NOT_GIVEN, **kwargs: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_exception(llm.RealtimeError("idle realtime session: no generation"))
        return fut

    def commit_audio(self) -> None:
        pass

    def clear_audio(self) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def truncate(self, *, message_id: str, **kwargs: Any) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True
        self._connect_task.cancel()


class IdleRealtimeModel(llm.RealtimeModel):
    """A realtime model whose sessions do nothing: enough for realtime-session reuse to happen.

    ``mutable`` sets ``mutable_chat_context`` / ``mutable_instructions`` / ``mutable_tools``
    (the capabilities that let livekit-agents ≥ 1.5.3 hand one session to the next agent).
    ``sessions`` lists every session created, so ``len(model.sessions) == 1`` after a handoff
    means the session was reused. ``connect_delay`` and ``update_delay`` (seconds) simulate a
    provider's latency; see :class:`IdleRealtimeSession`.
    """

    def __init__(
        self,
        *,
        mutable: bool = True,
        update_delay: float = 0.0,
        connect_delay: float = 0.0,
        update_errors: dict[str, BaseException] | None = None,
    ) -> None:
        wanted: dict[str, bool] = {
            "message_truncation": False,
            "turn_detection": False,
            "user_transcription": False,
            "auto_tool_reply_generation": False,
            "audio_output": False,
            "manual_function_calls": True,
            "mutable_chat_context": mutable,
            "mutable_instructions": mutable,
            "mutable_tools": mutable,
        }
        # the mutable_* capabilities appeared with session reuse; older releases reject them
        known = {f.name for f in dataclasses.fields(llm.RealtimeCapabilities)}
        super().__init__(
            capabilities=llm.RealtimeCapabilities(**{k: v for k, v in wanted.items() if k in known})
        )
        self.mutable = mutable
        self.update_delay = update_delay
        self.connect_delay = connect_delay
        self.update_errors = dict(update_errors or {})
        self.sessions: list[IdleRealtimeSession] = []

    @property
    def model(self) -> str:
        return "idle-realtime"

    @property
    def provider(self) -> str:
        return "otel-handoff"

    def session(self, **kwargs: Any) -> IdleRealtimeSession:
        session = IdleRealtimeSession(self)
        self.sessions.append(session)
        return session

    async def aclose(self) -> None:
        pass
