"""LlamaIndex offline: a real ``AgentWorkflow`` with ``FunctionAgent``s and its built-in ``handoff``
tool; only the LLM is scripted (:class:`ScriptedLLM`, a function-calling LLM that answers after a
set latency, its text streamed word by word, and emits LlamaIndex's own LLM chat events as any
LLM integration does). Nothing is downloaded: no tokenizer, no key, no network."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # LlamaIndex must never fetch anything here

from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from pydantic import PrivateAttr

__all__ = ["ScriptedLLM", "handoff_call", "make_workflow", "run"]


def handoff_call(
    to_agent: str, call_id: str, reason: str = "the user asks about an invoice"
) -> dict[str, Any]:
    """A scripted reply calling the workflow's ``handoff`` tool."""
    return {"tool": "handoff", "id": call_id, "args": {"to_agent": to_agent, "reason": reason}}


class ScriptedLLM(FunctionCallingLLM):
    """A function-calling LLM whose replies are scripted: each call pops the next one
    (``{"text": …}`` or :func:`handoff_call`'s) after ``latency`` seconds."""

    latency: float = 0.05
    _script: list[Any] = PrivateAttr(default_factory=list)
    calls: int = 0

    def __init__(self, script: Sequence[Any], latency: float = 0.05, **kwargs: Any) -> None:
        super().__init__(latency=latency, **kwargs)
        self._script = list(script)

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=True, is_function_calling_model=True, model_name="scripted")

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: Any = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                user_msg if isinstance(user_msg, ChatMessage) else ChatMessage(role="user", content=user_msg)
            )
        return {"messages": messages, "tools": tools}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = response.message.additional_kwargs.get("tool_calls") or []
        return [ToolSelection(tool_id=c["id"], tool_name=c["tool"], tool_kwargs=c["args"]) for c in calls]

    def _next(self) -> tuple[str, list[dict[str, Any]]]:
        reply = self._script.pop(0)
        self.calls += 1
        replies = reply if isinstance(reply, list) else [reply]
        calls = [r for r in replies if "tool" in r]
        text = " ".join(r["text"] for r in replies if "text" in r)
        return text, calls

    @staticmethod
    def _message(text: str, calls: list[dict[str, Any]]) -> ChatMessage:
        return ChatMessage(
            role="assistant", content=text, additional_kwargs={"tool_calls": calls} if calls else {}
        )

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        text, calls = self._next()

        async def gen() -> AsyncIterator[ChatResponse]:
            await asyncio.sleep(self.latency)
            if calls or not text:
                yield ChatResponse(message=self._message(text, calls), delta=text)
                return
            sent = ""
            for word in text.split(" "):
                delta = word if not sent else " " + word
                sent += delta
                yield ChatResponse(message=self._message(sent, []), delta=delta)

        return gen()

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text, calls = self._next()
        await asyncio.sleep(self.latency)
        return ChatResponse(message=self._message(text, calls))

    # the synchronous forms: never called by AgentWorkflow, required by the LLM interface
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        raise NotImplementedError

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        raise NotImplementedError

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


def make_workflow(
    triage_script: Sequence[Any],
    billing_script: Sequence[Any],
    *,
    can_handoff_to: Sequence[str] = ("billing",),
    latency: float = 0.05,
    streaming: bool = True,
) -> AgentWorkflow:
    """triage (may hand off to ``can_handoff_to``) and billing (may hand back to triage)."""
    triage = FunctionAgent(
        name="triage",
        description="Routes the user to the right agent.",
        system_prompt="You are triage.",
        llm=ScriptedLLM(triage_script, latency=latency),
        can_handoff_to=list(can_handoff_to),
        streaming=streaming,
    )
    billing = FunctionAgent(
        name="billing",
        description="Answers questions about invoices.",
        system_prompt="You are billing.",
        llm=ScriptedLLM(billing_script, latency=latency),
        can_handoff_to=["triage"],
        streaming=streaming,
    )
    return AgentWorkflow(agents=[triage, billing], root_agent="triage")


async def run(
    workflow: AgentWorkflow, question: str, *, stream: bool = True, **kwargs: Any
) -> tuple[Any, list[Any]]:
    """Run the workflow (its events streamed when ``stream``); its result and the events seen."""
    handler = workflow.run(user_msg=question, **kwargs)
    events = [event async for event in handler.stream_events()] if stream else []
    return await handler, events
