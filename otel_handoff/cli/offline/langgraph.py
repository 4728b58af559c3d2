"""LangGraph offline: real graphs, agents, checkpointer, langgraph-swarm and langgraph-supervisor;
only the chat models are scripted (:class:`ScriptedChatModel`, replies after a set latency,
streamed token by token when the graph streams messages)."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.types import Command, Send

with warnings.catch_warnings():  # deprecated in langgraph 1.x for langchain.agents; what the
    warnings.simplefilter("ignore")  # swarm's and supervisor's docs still build agents with
    from langgraph.prebuilt import create_react_agent

THREAD = "thread-42"


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies are scripted: each call takes the next reply after ``latency``."""

    who: str
    script: list[AIMessage]
    latency: float = 0.05

    @property
    def _llm_type(self) -> str:
        return f"scripted-{self.who}"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _next(self) -> AIMessage:
        return self.script.pop(0)

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        time.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self._next())])

    async def _agenerate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        await asyncio.sleep(self.latency)
        return ChatResult(generations=[ChatGeneration(message=self._next())])

    def _stream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Iterator[Any]:
        time.sleep(self.latency)
        for chunk in _chunks(self._next()):
            if run_manager is not None and chunk.text:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[Any]:
        await asyncio.sleep(self.latency)
        for chunk in _chunks(self._next()):
            if run_manager is not None and chunk.text:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _chunks(message: AIMessage) -> list[ChatGenerationChunk]:
    """A reply as a model streams it: its words one by one, or its tool calls in one chunk."""
    if message.tool_calls:
        return [
            ChatGenerationChunk(
                message=AIMessageChunk(content="", tool_calls=message.tool_calls, id=message.id)
            )
        ]
    words = str(message.content).split(" ")
    return [
        ChatGenerationChunk(message=AIMessageChunk(content=word if i == 0 else " " + word, id=message.id))
        for i, word in enumerate(words)
    ]


def transfer(tool_name: str, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": tool_name, "args": {}, "id": call_id}])


def agent(name: str, model: ScriptedChatModel, tools: list[Any], prompt: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools, prompt=prompt, name=name)


def swarm(
    *,
    triage_latency: float = 0.05,
    billing_latency: float = 0.12,
    billing_words: int = 6,
    checkpointer: bool = True,
) -> Any:
    """langgraph-swarm: triage hands off to billing with the swarm's own handoff tool."""
    from langgraph_swarm import create_handoff_tool, create_swarm

    triage = agent(
        "triage",
        ScriptedChatModel(
            who="triage", script=[transfer("transfer_to_billing", "call-swarm-1")], latency=triage_latency
        ),
        [create_handoff_tool(agent_name="billing")],
        "You are triage.",
    )
    words = ["Your", "last", "invoice", "was", "paid", "in", "full"]
    answer = " ".join(words[:billing_words] if billing_words <= len(words) else ["ok"] * billing_words)
    billing = agent(
        "billing",
        ScriptedChatModel(who="billing", script=[AIMessage(content=answer)], latency=billing_latency),
        [create_handoff_tool(agent_name="triage")],
        "You are billing.",
    )
    graph = create_swarm([triage, billing], default_active_agent="triage")
    return graph.compile(checkpointer=InMemorySaver() if checkpointer else None)


def supervisor(
    *, supervisor_latency: float = 0.08, billing_latency: float = 0.12, checkpointer: bool = True
) -> Any:
    """langgraph-supervisor: the supervisor delegates to billing, which hands back on its edge;
    the supervisor's second model call answers."""
    from langgraph_supervisor import create_supervisor

    billing = agent(
        "billing",
        ScriptedChatModel(
            who="billing", script=[AIMessage(content="Billing checked the invoice.")], latency=billing_latency
        ),
        [],
        "You are billing.",
    )
    model = ScriptedChatModel(
        who="supervisor",
        script=[
            transfer("transfer_to_billing", "call-sup-1"),
            AIMessage(content="All settled with billing."),
        ],
        latency=supervisor_latency,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = create_supervisor([billing], model=model, prompt="You are the supervisor.")
    return graph.compile(checkpointer=InMemorySaver() if checkpointer else None)


def fan_out_graph(targets: Any) -> Any:
    """The app's own handoff tool: ``Command(goto=targets, graph=PARENT)``."""

    @tool("dispatch", description="Send the case on")
    def dispatch(
        state: Annotated[Any, InjectedState], tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> Command:
        done = ToolMessage(content="dispatched", name="dispatch", tool_call_id=tool_call_id)
        messages = [*state["messages"], done]
        goto = [Send(t, {"messages": messages}) for t in targets] if isinstance(targets, list) else targets
        return Command(goto=goto, graph=Command.PARENT, update={"messages": [done]})

    triage = agent(
        "triage",
        ScriptedChatModel(who="t", script=[transfer("dispatch", "call-app-1")]),
        [dispatch],
        "t",
    )
    builder = StateGraph(MessagesState)
    builder.add_node(triage, destinations=("billing", "refunds"))
    for name in ("billing", "refunds"):
        model = ScriptedChatModel(who=name, script=[AIMessage(content=f"{name} done")], latency=0.02)
        builder.add_node(name, agent(name, model, [], name))
    builder.add_edge(START, "triage")
    return builder.compile()


def raising_handoff_agent() -> Any:
    """triage, whose handoff tool (naming its destination, as the swarm's do) raises."""

    @tool("transfer_to_billing", description="to billing")
    def broken_handoff() -> Command:
        raise RuntimeError("the CRM is down")

    broken_handoff.metadata = {"__handoff_destination": "billing"}
    model = ScriptedChatModel(
        who="t", script=[transfer("transfer_to_billing", "call-broken"), AIMessage(content="sorry")]
    )
    return agent("triage", model, [broken_handoff], "t")


def question(text: str = "Why was I charged twice?") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def config(thread: str | None = THREAD, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"configurable": {"thread_id": thread}} if thread else {}
    return {**found, **extra}


async def run_async(
    graph: Any, *, thread: str | None = THREAD, stream_mode: Any = "updates", **kwargs: Any
) -> list[Any]:
    """The graph streamed as an app streams it (async); what the app received."""
    return [
        part async for part in graph.astream(question(), config(thread), stream_mode=stream_mode, **kwargs)
    ]


def run_sync(
    graph: Any, *, thread: str | None = THREAD, stream_mode: Any = "updates", **kwargs: Any
) -> list[Any]:
    return list(graph.stream(question(), config(thread), stream_mode=stream_mode, **kwargs))
