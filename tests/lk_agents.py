"""Agents for the LiveKit tests: real `Agent` subclasses whose hooks the tests can script.

No `from __future__ import annotations`: livekit-agents builds tool schemas from real annotations.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import Agent, AgentTask, RunContext, function_tool

from otel_handoff.cli.offline.livekit import finish_task
from otel_handoff.core import schema as sc

# an update_agent handoff's phases, in order: its task waits for the loop (update_agent() spawned
# it), LiveKit prepares and switches between the phases, the new on_enter task waits for the loop too
UPDATE_AGENT_PHASES = [
    sc.SPAN_LOOP_WAIT,
    sc.SPAN_PREPARE,
    sc.SPAN_DRAIN,
    sc.SPAN_CLOSE,
    sc.SPAN_SWITCH,
    sc.SPAN_START,
    sc.SPAN_LOOP_WAIT,
    sc.SPAN_ON_ENTER,
]

Hook = Callable[[Agent], Awaitable[None]] | None


class HookedAgent(Agent):
    """An agent whose on_enter / on_exit run scripted coroutines."""

    def __init__(
        self,
        instructions: str = "You help the caller.",
        *,
        enter: Hook = None,
        exit: Hook = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(instructions=instructions, **kwargs)
        # not `_enter`: livekit-agents 2.0's Agent has a method of that name
        self._enter_hook = enter
        self._exit_hook = exit
        self.entered = asyncio.Event()

    async def on_enter(self) -> None:
        self.entered.set()
        if self._enter_hook is not None:
            await self._enter_hook(self)

    async def on_exit(self) -> None:
        if self._exit_hook is not None:
            await self._exit_hook(self)


class Billing(HookedAgent):
    pass


class Support(HookedAgent):
    pass


class Sales(HookedAgent):
    pass


class CollectEmail(AgentTask[str]):
    def __init__(self) -> None:
        super().__init__(instructions="Collect an email address.")

    async def on_enter(self) -> Any:
        return finish_task(self, "someone@example.com")


class Triage(HookedAgent):
    """Routes the caller: a tool transfer to Billing, or an AgentTask round trip."""

    def __init__(self, *, next_agent: Callable[[], Agent] | None = None, **kwargs: Any) -> None:
        super().__init__("You route the caller.", **kwargs)
        self._next_agent = next_agent or Billing

    @function_tool
    async def transfer(self) -> Agent:
        """Transfer the caller to billing."""
        return self._next_agent()

    @function_tool
    async def ask_email(self) -> str:
        """Collect the caller's email with a task, then come back."""
        return await CollectEmail()


def slow(seconds: float) -> Callable[[Agent], Awaitable[None]]:
    """A hook that takes `seconds`: the work being measured, not a synchronisation."""

    async def hook(_: Agent) -> None:
        await asyncio.sleep(seconds)

    return hook


def gated(started: asyncio.Event, release: asyncio.Event) -> Callable[[Agent], Awaitable[None]]:
    """A hook that signals it started and then waits to be released."""

    async def hook(_: Agent) -> None:
        started.set()
        await release.wait()

    return hook


def failing(error: BaseException) -> Callable[[Agent], Awaitable[None]]:
    async def hook(_: Agent) -> None:
        raise error

    return hook


@function_tool
async def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return "found"


class WithTools(HookedAgent):
    """Same instructions as its peers, one extra tool: reuse can only be blocked by tools."""

    def __init__(self, instructions: str = "You help the caller.", **kwargs: Any) -> None:
        super().__init__(instructions, tools=[lookup_order], **kwargs)


class CustomSTTNode(HookedAgent):
    """Overrides stt_node, which keeps livekit-agents from handing the STT pipeline over."""

    async def stt_node(self, audio: Any, model_settings: Any) -> Any:
        async for event in Agent.default.stt_node(self, audio, model_settings):
            yield event


@function_tool
async def transfer_after_update(ctx: RunContext) -> Agent:
    """Check the account, then transfer to billing."""
    await ctx.update("checking your account")
    return Billing()


class HandsOffAgain(AgentTask[str]):
    """An AgentTask whose on_enter hands the conversation to another agent straight away."""

    def __init__(self) -> None:
        super().__init__(instructions="Hand over at once.")

    async def on_enter(self) -> None:
        self.session.update_agent(Sales())


class Router(HookedAgent):
    """Transfers to a fresh Router, or runs an AgentTask round trip, when the LLM asks."""

    def __init__(self) -> None:
        super().__init__("You route the caller.")
        self.task_returned = asyncio.Event()  # set once the AgentTask handed back to this agent

    @function_tool
    async def transfer(self) -> Agent:
        """Transfer the caller."""
        return Router()

    @function_tool
    async def ask_email(self) -> str:
        """Collect the caller's email with a task, then come back."""
        email = await CollectEmail()
        self.task_returned.set()
        return email


class Asker(HookedAgent):
    """Runs an AgentTask round trip when the LLM calls its one tool."""

    @function_tool
    async def ask_email(self) -> str:
        """Collect the caller's email with a task, then come back."""
        return await CollectEmail()
