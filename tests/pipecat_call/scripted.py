"""The bot's speech-to-text, model and text-to-speech, scripted: what a provider's service would be.

- :class:`EndpointingSTT` hears the caller's audio (its level, 20 ms at a time) and, once the caller
  has been quiet for :data:`ENDPOINTING_SECONDS` after speaking, transcribes the turn as its one
  scripted sentence, as a streaming STT's endpointing does: a ``TranscriptionFrame`` and then a
  ``ProposedUserStoppedSpeakingFrame`` (a control frame, so it stays behind the transcription:
  a ``UserStoppedSpeakingFrame``, a system frame, would overtake it at the user aggregator, which
  then ends the turn only on its 0.5 s timeout).
- :class:`ScriptedLLM` greets, calls ``transfer_to_billing`` after the caller's turn, then answers.
- :func:`triage_llm` and :func:`billing_llm`: the same script split between two workers' models
  (``workers_bot.py``); triage says it transfers the caller and calls the tool in one response.
- :class:`ToneTTS` speaks each node's tone (``livekit_call/tones.py``): whoever hears a frame
  knows which node (or worker) spoke it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
from livekit_call import tones
from pipecat.frames.frames import (
    Frame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.services.settings import STTSettings, TTSSettings
from pipecat.services.stt_service import STTService
from pipecat.services.tts_service import TTSService

from otel_handoff.cli.offline.pipecat_flows import ScriptedLLM as _ScriptedLLM
from otel_handoff.cli.offline.pipecat_workers import TalkingLLM

ENDPOINTING_SECONDS = 0.3  # quiet after speech before the STT ends the turn
_VOICED = 0.01  # of full scale (root mean square): speech, not the caller's silence
TTS_SECONDS = 1.0  # each reply's audio
GREETING = "Support line, how can I help you today?"
BILLING_REPLY = "I can help you with your bill."
FAREWELL = "Let me transfer you to billing."


class EndpointingSTT(STTService):
    """``proposes_turns=False``: transcripts only, the turn left to the VAD."""

    def __init__(self, transcript: str, *, proposes_turns: bool = True) -> None:
        super().__init__(
            settings=STTSettings(model=None, language=None), ttfs_p99_latency=ENDPOINTING_SECONDS
        )
        self._transcript = transcript
        self._proposes_turns = proposes_turns
        self._speaking = False
        self._quiet_since: float | None = None
        self.quiet_since_ns = 0  # wall clock: when the caller's voice last stopped reaching us

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        level = tones.rms(np.frombuffer(audio, dtype=np.int16))
        now = time.monotonic()
        if level >= _VOICED:
            self._quiet_since = None
            if not self._speaking:
                self._speaking = True
                if self._proposes_turns:
                    await self.push_frame(ProposedUserStartedSpeakingFrame())
        elif self._speaking:
            if self._quiet_since is None:
                self._quiet_since, self.quiet_since_ns = now, time.time_ns()
            if now - self._quiet_since >= ENDPOINTING_SECONDS:
                self._speaking = False
                yield TranscriptionFrame(
                    self._transcript, "caller", time.strftime("%Y-%m-%dT%H:%M:%S"), finalized=True
                )
                if self._proposes_turns:
                    yield ProposedUserStoppedSpeakingFrame()
        yield None


class ScriptedLLM(_ScriptedLLM):
    def __init__(self) -> None:
        super().__init__([GREETING, [("transfer_to_billing", {})], BILLING_REPLY])


def triage_llm() -> TalkingLLM:
    return TalkingLLM([GREETING, (FAREWELL, [("transfer_to_billing", {})])])


def billing_llm() -> TalkingLLM:
    return TalkingLLM([BILLING_REPLY])


class ToneTTS(TTSService):
    """Each node's replies in its tone, the node told by the reply's text; a worker's own TTS
    (``voice``) speaks every reply in that worker's tone."""

    def __init__(self, voice: str | None = None) -> None:
        self._voice = voice
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            push_text_frames=False,
            settings=TTSSettings(model=None, voice=None, language=None),
        )

    def can_generate_metrics(self) -> bool:
        return False

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, Any]:  # type: ignore[override]
        voice = self._voice or ("triage" if text.strip() == GREETING else "billing")
        audio = tones.tone(tones.TONES[voice], TTS_SECONDS, self.sample_rate)
        yield TTSAudioRawFrame(
            audio=audio, sample_rate=self.sample_rate, num_channels=1, context_id=context_id
        )
