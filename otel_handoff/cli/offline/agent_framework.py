"""Microsoft Agent Framework offline: real agents, function loop, middleware, ``HandoffBuilder``
workflow, runner and checkpoints; only the model is scripted (:class:`ScriptedClient`: each call
takes the next reply after a set latency; a streamed text comes word by word)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
)
from agent_framework.observability import ChatTelemetryLayer
from agent_framework_orchestrations import HandoffBuilder

TASK = "Why was I charged twice?"


class ScriptedClient(FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, BaseChatClient):
    """A chat client whose replies are scripted: ``{"text": ...}``, ``{"tool": name, "id": call_id}``
    (its arguments in ``"args"``; several calls: ``{"tools": [(name, call_id), ...]}``) or
    ``{"raise": exception}``."""

    OTEL_PROVIDER_NAME = "scripted"

    def __init__(self, name: str, script: list[dict[str, Any]], latency: float = 0.05, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.script = list(script)
        self.latency = latency
        self.calls = 0

    def _reply(self) -> dict[str, Any]:
        self.calls += 1
        return self.script.pop(0) if self.script else {"text": f"{self.name} has nothing more to say."}

    @staticmethod
    def _contents(reply: dict[str, Any]) -> list[Content]:
        if "raise" in reply:
            raise reply["raise"]
        calls = reply.get("tools") or ([(reply["tool"], reply["id"])] if "tool" in reply else [])
        if calls:
            return [
                Content.from_function_call(
                    call_id=call_id, name=name, arguments=json.dumps(reply.get("args", {}))
                )
                for name, call_id in calls
            ]
        return [Content.from_text(text=reply["text"])]

    def _inner_get_response(self, *, messages: Any, stream: bool, options: Any, **kwargs: Any) -> Any:
        reply = self._reply()

        if stream:

            async def updates() -> Any:
                await asyncio.sleep(self.latency)
                contents = self._contents(reply)
                message_id = f"m-{self.name}-{self.calls}"
                if contents[0].type == "function_call":
                    yield ChatResponseUpdate(
                        contents=contents, role="assistant", message_id=message_id, finish_reason="tool_calls"
                    )
                    return
                words = reply["text"].split(" ")  # streamed word by word, as a model streams tokens
                for i, word in enumerate(words):
                    last = i == len(words) - 1
                    yield ChatResponseUpdate(
                        contents=[Content.from_text(text=word if last else word + " ")],
                        role="assistant",
                        message_id=message_id,
                        finish_reason="stop" if last else None,
                    )

            return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

        async def response() -> ChatResponse:
            await asyncio.sleep(self.latency)
            return ChatResponse(messages=[Message(role="assistant", contents=self._contents(reply))])

        return response()


def agent(name: str, script: list[dict[str, Any]], latency: float = 0.05, **kwargs: Any) -> Agent:
    """An agent of a handoff workflow (the builder needs per-service-call history persistence)."""
    return Agent(
        client=ScriptedClient(name, script, latency),
        name=name,
        instructions=f"You are {name}.",
        description=f"The {name} agent.",
        require_per_service_call_history_persistence=True,
        **kwargs,
    )


def support(
    triage: list[dict[str, Any]] | None = None,
    billing: list[dict[str, Any]] | None = None,
    *,
    latency: float = 0.05,
    configure: Callable[[Any], Any] | None = None,
    **builder: Any,
) -> tuple[Any, dict[str, Agent]]:
    """triage --handoff_to_billing--> billing (the default scripts), built by ``HandoffBuilder``."""
    triage = triage or [{"tool": "handoff_to_billing", "id": "call-handoff-1"}]
    billing = billing or [{"text": "Billing here: the second charge is refunded."}]
    agents = {"triage": agent("triage", triage, latency), "billing": agent("billing", billing, latency)}
    made = HandoffBuilder(name="support", participants=list(agents.values()), **builder).with_start_agent(
        agents["triage"]
    )
    if configure is not None:
        made = configure(made)
    return made.build(), agents


async def stream(workflow: Any, task: Any = TASK, **kwargs: Any) -> list[Any]:
    """Every event of a streamed run, as the app receives them."""
    return [event async for event in workflow.run(task, stream=True, **kwargs)]


def shape(events: list[Any]) -> list[tuple[Any, ...]]:
    """What an app sees of each event, comparable across runs: its type, executor and data's text
    and contents (ids made per run left out)."""
    seen = []
    for event in events:
        data = getattr(event, "data", None)
        contents = [
            (c.type, getattr(c, "name", None), getattr(c, "call_id", None), getattr(c, "text", None))
            for c in getattr(data, "contents", None) or ()
        ]
        seen.append((event.type, getattr(event, "executor_id", None), type(data).__name__, contents))
    return seen


def handoffs_sent(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.data.source, e.data.target) for e in events if e.type == "handoff_sent"]
