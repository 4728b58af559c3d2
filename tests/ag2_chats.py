"""Running the offline AG2 support chat and reading what it produced, for the AG2 tests."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from typing import Any

from autogen.agentchat import a_initiate_group_chat, initiate_group_chat
from autogen.io.base import IOStream

from otel_handoff.cli.offline.ag2_classic import SUPPORT_CHAT_MESSAGE

MAX_ROUNDS = 30


class RecordingIOStream:
    """Collects AG2's own events (type and, for transitions, source and target type)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", flush: bool = False) -> None:
        self.events.append(("print",))

    def send(self, message: Any) -> None:
        event = getattr(message, "content", message)  # events may be wrapped
        record: tuple[str, ...] = (type(message).__name__,)
        source = getattr(event, "source_agent", None)
        target = getattr(event, "transition_target", None)
        if source is not None or target is not None:
            record += (getattr(source, "name", ""), type(target).__name__)
        self.events.append(record)

    def input(self, prompt: str = "", *, password: bool = False) -> str:
        raise AssertionError("the offline chat never asks for input")


@dataclass
class ChatRun:
    """What a host app sees of one chat: results and AG2's events."""

    history: list[dict[str, Any]]
    context: dict[str, Any]
    last_speaker: str
    summary: Any
    events: list[tuple[str, ...]]


def run_chat(pattern: Any, max_rounds: int = MAX_ROUNDS) -> ChatRun:
    stream = RecordingIOStream()
    with IOStream.set_default(stream), contextlib.redirect_stdout(io.StringIO()):
        result, context, last = initiate_group_chat(
            pattern=pattern, messages=SUPPORT_CHAT_MESSAGE, max_rounds=max_rounds
        )
    return ChatRun(result.chat_history, context.to_dict(), last.name, result.summary, stream.events)


async def a_run_chat(pattern: Any, max_rounds: int = MAX_ROUNDS) -> ChatRun:
    stream = RecordingIOStream()
    with IOStream.set_default(stream), contextlib.redirect_stdout(io.StringIO()):
        result, context, last = await a_initiate_group_chat(
            pattern=pattern, messages=SUPPORT_CHAT_MESSAGE, max_rounds=max_rounds
        )
    return ChatRun(result.chat_history, context.to_dict(), last.name, result.summary, stream.events)
