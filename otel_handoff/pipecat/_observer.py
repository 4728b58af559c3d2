"""The worker observer that sees the bot start speaking in a new node (the end of dead air)."""

from __future__ import annotations

import time
import weakref
from typing import Any

from pipecat.frames.frames import BotStartedSpeakingFrame
from pipecat.observers.base_observer import BaseObserver

from ..core.faults import guard
from ._transition import FlowState, FlowsTelemetry


class _FirstSpeech(BaseObserver):
    """Passes over every frame but ``BotStartedSpeakingFrame``; sees each frame once."""

    def __init__(self, telemetry: FlowsTelemetry, state: FlowState) -> None:
        super().__init__()
        self._telemetry = telemetry
        self._state = weakref.ref(state)
        self._last_frame_id: int | None = None

    async def on_push_frame(self, data: Any) -> None:
        frame = data.frame
        if not isinstance(frame, BotStartedSpeakingFrame) or not self._telemetry.enabled:
            return
        if frame.id == self._last_frame_id:
            return  # the same frame pushed on by the next processor
        self._last_frame_id = frame.id
        state = self._state()
        if state is not None and state.awaiting_speech is not None:
            guard("first speech", state.first_speech, time.time_ns())


def first_speech_observer(telemetry: FlowsTelemetry, state: FlowState) -> BaseObserver:
    return _FirstSpeech(telemetry, state)
