"""Scripted model edges for the real call: what a provider plugin would be, and nothing else.

The room, the WebRTC media, the worker, the job process and every framework path are real;
only the models answer from a script (the pattern of ``otel_handoff/cli/offline/livekit.py``,
copied so the agent's process imports nothing of ours):

- :class:`EndpointingSTT` hears speech where the caller's samples pass 1 % of full scale (the
  caller times its end of speech the same way), reports its end on the audio's own timeline
  and, ``silence`` seconds after it stops,
  sends a final transcript and the end of speech, as a streaming provider's endpointing does, and
  finalizes at once when flushed (the VAD's end of speech, the session closing);
- :class:`ScriptedLLM` calls each scripted tool once when it is offered, else replies;
- :class:`ToneTTS` speaks any text as a tone of its own frequency (each agent's voice).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np
import tones
from livekit import rtc
from livekit.agents import llm, stt, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NOT_GIVEN, APIConnectOptions
from timeline import Timeline


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


_SPEECH = 0.01  # a sample this loud (of full scale) is speech: the caller's own measure of its end


class EndpointingSTT(stt.STT):
    """A streaming STT that recognises ``transcript`` in whatever the caller says."""

    def __init__(self, transcript: str, *, silence: float = 0.3) -> None:
        # manual_flush: 1.8 flushes such an STT instead of waiting; livekit-agents 2.0 has no such capability
        flush = {"manual_flush": True} if "manual_flush" in _fields(stt.STTCapabilities) else {}
        capabilities = stt.STTCapabilities(streaming=True, interim_results=False, **flush)
        super().__init__(capabilities=capabilities)
        self.transcript = transcript
        self.silence = silence

    @property
    def model(self) -> str:
        return "scripted-endpointing"

    @property
    def provider(self) -> str:
        return "test"

    async def _recognize_impl(self, buffer: Any, *, language: Any = NOT_GIVEN, **kwargs: Any) -> Any:
        raise NotImplementedError("EndpointingSTT only streams")

    def stream(
        self,
        *,
        language: Any = NOT_GIVEN,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> _EndpointingStream:
        return _EndpointingStream(stt=self, conn_options=conn_options)


class _EndpointingStream(stt.RecognizeStream):
    async def _run(self) -> None:
        scripted: EndpointingSTT = self._stt  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        speaking = False
        last_speech = 0.0
        endpoint: asyncio.TimerHandle | None = None
        timeline = Timeline()

        def final(text: str) -> None:
            words = stt.SpeechData(language="en", text=text, confidence=1.0)
            self._event_ch.send_nowait(
                stt.SpeechEvent(type=stt.SpeechEventType.FINAL_TRANSCRIPT, alternatives=[words])
            )

        def end_of_speech() -> None:
            nonlocal speaking, endpoint
            speaking, endpoint = False, None
            final(scripted.transcript)
            self._event_ch.send_nowait(
                stt.SpeechEvent(type=stt.SpeechEventType.END_OF_SPEECH, speech_end_time=last_speech)
            )

        try:
            async for frame in self._input_ch:
                if not isinstance(frame, rtc.AudioFrame):
                    # a flush (the session closing): finalize now, as a provider does
                    if endpoint is not None:
                        endpoint.cancel()
                        end_of_speech()
                    else:
                        final("")
                    continue
                samples = np.frombuffer(frame.data, dtype=np.int16)[:: frame.num_channels]
                frame_start = timeline.add(samples.size, frame.sample_rate)
                voiced = np.flatnonzero(np.abs(samples) > _SPEECH * 32767)
                if not voiced.size:
                    continue
                last_speech = frame_start + (voiced[-1] + 1) / frame.sample_rate
                if not speaking:
                    speaking = True
                    self._event_ch.send_nowait(
                        stt.SpeechEvent(
                            type=stt.SpeechEventType.START_OF_SPEECH, speech_start_time=last_speech
                        )
                    )
                if endpoint is not None:
                    endpoint.cancel()
                # a timer, not the next frame: a caller's silence may send no packets at all
                endpoint = loop.call_later(scripted.silence, end_of_speech)
        finally:
            if endpoint is not None:
                endpoint.cancel()


def _tool_name(tool: Any) -> str | None:
    info = getattr(tool, "info", None)
    return getattr(info, "name", None)


class _ScriptedLLMStream(llm.LLMStream):
    def __init__(self, scripted: ScriptedLLM, reply: llm.FunctionToolCall | str, **kwargs: Any) -> None:
        super().__init__(scripted, **kwargs)
        self._reply = reply

    async def _run(self) -> None:
        if isinstance(self._reply, llm.FunctionToolCall):
            delta = llm.ChoiceDelta(role="assistant", tool_calls=[self._reply])
        else:
            delta = llm.ChoiceDelta(role="assistant", content=self._reply)
        self._event_ch.send_nowait(llm.ChatChunk(id=utils.shortuuid("chunk_"), delta=delta))


class ScriptedLLM(llm.LLM):
    """Calls the first of ``tool_calls`` offered and not yet called in the chat, else says ``reply``."""

    def __init__(self, tool_calls: Iterable[str] = (), *, reply: str = "Certainly.") -> None:
        super().__init__()
        self.tool_calls = tuple(tool_calls)
        self.reply = reply

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "test"

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[Any] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> _ScriptedLLMStream:
        tools = list(tools or [])
        offered = {_tool_name(t) for t in tools}
        called = {item.name for item in chat_ctx.items if item.type == "function_call"}
        reply: llm.FunctionToolCall | str = self.reply
        for name in self.tool_calls:
            if name in offered and name not in called:
                reply = llm.FunctionToolCall(name=name, arguments="{}", call_id=utils.shortuuid("call_"))
                break
        return _ScriptedLLMStream(self, reply, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)


class ToneTTS(tts.TTS):
    """Speaks every text as ``seconds`` of a tone at ``frequency`` (an agent's voice)."""

    def __init__(self, frequency: float, *, seconds: float = 0.4, sample_rate: int = 24000) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False), sample_rate=sample_rate, num_channels=1
        )
        self.frequency = frequency
        self.seconds = seconds

    @property
    def model(self) -> str:
        return f"tone-{self.frequency:g}hz"

    @property
    def provider(self) -> str:
        return "test"

    def synthesize(
        self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
    ) -> _ToneStream:
        return _ToneStream(tts=self, input_text=text, conn_options=conn_options)


class _ToneStream(tts.ChunkedStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        voice: ToneTTS = self._tts  # type: ignore[assignment]
        output_emitter.initialize(
            request_id=utils.shortuuid("tone_"),
            sample_rate=voice.sample_rate,
            num_channels=1,
            mime_type="audio/pcm",
        )
        output_emitter.push(tones.tone(voice.frequency, voice.seconds, voice.sample_rate))
        output_emitter.flush()
