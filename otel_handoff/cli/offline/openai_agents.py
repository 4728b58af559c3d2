"""OpenAI Agents SDK handoffs run offline: the real SDK, scripted models, a loopback realtime server.

Used by ``otel-handoff demo --framework openai-agents`` and by the tests. Text runs use the SDK's
own ``agents.testing.ScriptedModel``; realtime sessions run either the SDK's
``ScriptedRealtimeModel`` (with server latency added) or the real ``OpenAIRealtimeWebSocketModel``
against :class:`LoopbackRealtimeServer`, a websocket server on 127.0.0.1 speaking just enough of
the Realtime protocol. Nothing leaves the machine: the SDK's own trace export is replaced.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, AgentHooks, RunConfig, RunHooks, Runner, handoff, set_trace_processors
from agents.realtime import RealtimeAgent, RealtimeRunner, realtime_handoff
from agents.realtime.model_events import (
    RealtimeModelAudioEvent,
    RealtimeModelAudioInterruptedEvent,
    RealtimeModelRawServerEvent,
    RealtimeModelToolCallEvent,
    RealtimeModelTurnEndedEvent,
    RealtimeModelTurnStartedEvent,
)
from agents.realtime.model_inputs import RealtimeModelSendSessionUpdate, RealtimeModelSendToolOutput
from agents.realtime.testing import ScriptedRealtimeModel
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

# what the scenarios feed the SDK that must never reach a span
USER_INPUT = "I was double charged on invoice 4711"
TRIAGE_INSTRUCTIONS = "Route the customer to the right desk."
BILLING_INSTRUCTIONS = "You handle billing questions for ACME."
BILLING_REPLY = "Billing here: refunded order 4711."
REFUNDS_REPLY = "Refunds here: all settled."
HANDOFF_ARGUMENTS = {"reason": "caller disputes invoice 4711"}
PRIVATE_TEXTS = (USER_INPUT, TRIAGE_INSTRUCTIONS, BILLING_INSTRUCTIONS, BILLING_REPLY, REFUNDS_REPLY, "4711")

# a realtime session that does not reach the new agent's audio within this is a broken scenario
SESSION_TIMEOUT = 15.0


def quiet_sdk_tracing() -> None:
    """The SDK's own trace export (to OpenAI) replaced by nothing: offline, no key, no warning."""
    set_trace_processors([])


async def _sleep(seconds: float) -> None:
    if seconds:
        await asyncio.sleep(seconds)


@dataclass
class TextScenario:
    """triage -> billing (-> refunds when ``chain``), with what each step costs."""

    on_handoff_delay: float = 0.0
    input_filter_delay: float | None = None  # None: no input filter
    hooks_delay: float | None = None  # None: no RunHooks.on_handoff
    instructions_delay: float | None = None  # None: billing's instructions are a plain string
    reply_delay: float = 0.0  # billing's model call until its answer
    chain: bool = False  # billing hands off to refunds in turn
    several: bool = False  # triage asks for billing and refunds in one response
    raising_on_handoff: bool = False
    raising_input_filter: bool = False
    agent_hooks: bool = False  # triage has AgentHooks with an on_handoff
    group_id: str | None = None  # the run's conversation, as the app names it (RunConfig.group_id)
    events: list[str] = field(default_factory=list)  # what the app's callbacks saw, in order

    def agents(self) -> Agent[Any]:
        events = self.events

        async def on_handoff(context: Any, arguments: Any = None) -> None:
            events.append("on_handoff")
            await _sleep(self.on_handoff_delay)
            if self.raising_on_handoff:
                raise LookupError(f"no billing desk for {USER_INPUT}")

        async def input_filter(data: Any) -> Any:
            events.append("input_filter")
            await _sleep(self.input_filter_delay or 0.0)
            if self.raising_input_filter:
                raise ValueError(f"cannot trim {USER_INPUT}")
            return data

        async def billing_instructions(context: Any, agent: Any) -> str:
            events.append("instructions")
            await _sleep(self.instructions_delay or 0.0)
            return BILLING_INSTRUCTIONS

        async def billing_reply(call: Any) -> list[Any]:
            events.append("billing_model")
            await _sleep(self.reply_delay)
            if self.chain:
                return [function_call("transfer_to_refunds", {}, call_id="call_refunds")]
            return [assistant_message(BILLING_REPLY)]

        refunds = Agent(
            name="refunds", model=ScriptedModel([[assistant_message(REFUNDS_REPLY)]]), instructions="Refunds."
        )
        billing = Agent(
            name="billing",
            instructions=billing_instructions
            if self.instructions_delay is not None
            else BILLING_INSTRUCTIONS,
            model=ScriptedModel([ModelStep.respond(billing_reply)]),
            handoffs=[refunds] if self.chain else [],
        )
        to_billing = _billing_handoff(
            billing, on_handoff, input_filter if self.input_filter_delay is not None else None
        )
        first_response = [function_call("transfer_to_billing", HANDOFF_ARGUMENTS, call_id="call_billing")]
        if self.several:
            first_response.append(function_call("transfer_to_refunds", {}, call_id="call_refunds_too"))
        return Agent(
            name="triage",
            instructions=TRIAGE_INSTRUCTIONS,
            model=ScriptedModel([first_response]),
            handoffs=[to_billing, refunds],
            hooks=AgentHandoffHooks(events) if self.agent_hooks else None,
        )

    def hooks(self) -> RunHooks[Any] | None:
        if self.hooks_delay is None:
            return None
        return _SlowHandoffHooks(self.hooks_delay, self.events)


def _billing_handoff(billing: Agent[Any], on_handoff: Any, input_filter: Any) -> Any:
    """``transfer_to_billing``, taking the reason the model gives (which never reaches a span)."""
    from pydantic import BaseModel

    class Reason(BaseModel):
        reason: str

    async def on_handoff_with_reason(context: Any, arguments: Reason) -> None:
        await on_handoff(context, arguments)

    return handoff(billing, on_handoff=on_handoff_with_reason, input_type=Reason, input_filter=input_filter)


class _SlowHandoffHooks(RunHooks[Any]):
    def __init__(self, delay: float, events: list[str]) -> None:
        self.delay = delay
        self.events = events

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        self.events.append("hooks")
        await _sleep(self.delay)


class AgentHandoffHooks(AgentHooks[Any]):
    """Hooks on an agent (the SDK calls the source agent's ``on_handoff``)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        self.events.append("agent_hooks")


async def run_text(scenario: TextScenario, mode: str = "run") -> tuple[Any, list[str]]:
    """Run the scenario (``run``, ``streamed`` or, from a thread, ``sync``): final output, events."""
    agent = scenario.agents()
    options: dict[str, Any] = {"hooks": scenario.hooks()}
    if scenario.group_id is not None:
        options["run_config"] = RunConfig(group_id=scenario.group_id)
    if mode == "streamed":
        result = Runner.run_streamed(agent, USER_INPUT, **options)
        async for event in result.stream_events():
            if event.type == "run_item_stream_event":
                scenario.events.append(f"stream:{event.name}")
            elif event.type == "agent_updated_stream_event":
                scenario.events.append(f"stream:agent:{event.new_agent.name}")
        return result.final_output, scenario.events
    if mode == "sync":
        result = await asyncio.to_thread(Runner.run_sync, agent, USER_INPUT, **options)
    else:
        result = await Runner.run(agent, USER_INPUT, **options)
    return result.final_output, scenario.events


# --- realtime ---------------------------------------------------------------------------------------


def realtime_agents(
    on_handoff_delay: float = 0.0, instructions_delay: float = 0.0, raising_on_handoff: bool = False
) -> RealtimeAgent[Any]:
    """triage -> billing, as realtime agents; billing's instructions may take a while to build."""

    async def on_handoff(context: Any) -> None:
        await _sleep(on_handoff_delay)
        if raising_on_handoff:
            raise LookupError(f"no billing desk for {USER_INPUT}")

    async def billing_instructions(context: Any, agent: Any) -> str:
        await _sleep(instructions_delay)
        return BILLING_INSTRUCTIONS

    billing = RealtimeAgent(name="billing", instructions=billing_instructions)
    return RealtimeAgent(
        name="triage",
        instructions=TRIAGE_INSTRUCTIONS,
        handoffs=[realtime_handoff(billing, on_handoff=on_handoff)],
    )


async def talk_until_new_agent_speaks(session: Any, new_agent: str = "billing") -> list[str]:
    """Consume the session's events until ``new_agent``'s first audio: the event types, in order."""
    seen: list[str] = []

    async def consume() -> None:
        async for event in session:
            seen.append(event.type)
            if event.type == "audio" and session._current_agent.name == new_agent:
                return
            if event.type == "error":
                return

    await asyncio.wait_for(consume(), SESSION_TIMEOUT)
    return seen


class LatentRealtimeModel(ScriptedRealtimeModel):
    """The SDK's scripted realtime transport with a server's latency: ack, old response, new audio."""

    def __init__(
        self,
        *,
        ack_delay: float = 0.04,
        old_response_tail: float = 0.0,
        audio_delay: float = 0.1,
        interrupt: bool = False,
    ) -> None:
        super().__init__(strict=False)
        self.interrupt = interrupt  # the caller talks over the old agent right after the handoff
        self.ack_delay = ack_delay
        self.old_response_tail = old_response_tail
        self.audio_delay = audio_delay
        self.output_sent = asyncio.Event()  # the handoff's tool output reached the "server"
        self._tasks: set[asyncio.Task[None]] = set()

    def _later(self, delay: float, *events: Any) -> None:
        async def emit() -> None:
            await asyncio.sleep(delay)
            await self.emit(*events)

        task = asyncio.get_running_loop().create_task(emit())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def ask_for_billing(self) -> None:
        """The old agent's response calls ``transfer_to_billing``; it may go on for a while."""
        await self.emit(
            RealtimeModelTurnStartedEvent(response_id="resp_old"),
            RealtimeModelToolCallEvent(
                name="transfer_to_billing", call_id="call_billing", arguments="{}", id="item_call"
            ),
        )
        self._later(self.old_response_tail, RealtimeModelTurnEndedEvent(response_id="resp_old"))

    async def send_event(self, event: Any) -> None:
        await super().send_event(event)
        if isinstance(event, RealtimeModelSendSessionUpdate):
            self._later(self.ack_delay, RealtimeModelRawServerEvent(data={"type": "session.updated"}))
        if isinstance(event, RealtimeModelSendToolOutput) and event.start_response:
            self.output_sent.set()
            if self.interrupt:
                self._later(
                    0.0, RealtimeModelAudioInterruptedEvent(item_id="item_old_audio", content_index=0)
                )
            # the server starts the new response once the old one is done
            self._later(
                self.old_response_tail + self.audio_delay,
                RealtimeModelTurnStartedEvent(response_id="resp_new"),
                RealtimeModelAudioEvent(
                    data=b"\0\0" * 240, response_id="resp_new", item_id="a2", content_index=0
                ),
                RealtimeModelTurnEndedEvent(response_id="resp_new"),
            )


async def run_scripted_realtime(model: LatentRealtimeModel, agent: RealtimeAgent[Any]) -> list[str]:
    session = await RealtimeRunner(agent, model=model).run()
    async with session:
        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(model.ask_for_billing()))
        return await talk_until_new_agent_speaks(session)


LOOPBACK_SESSION_ID = "sess_loopback"  # the server's id of every session (gen_ai.conversation.id)
_SESSION = {
    "type": "realtime",
    "object": "realtime.session",
    "id": LOOPBACK_SESSION_ID,
    "model": "gpt-realtime",
}


@dataclass
class LoopbackRealtimeServer:
    """A Realtime websocket server on 127.0.0.1 (port bound by the OS) for the SDK's real client.

    Its first response calls ``transfer_to_billing`` and keeps going for ``old_response_tail``
    seconds; ``session.updated`` answers the handoff's ``session.update`` after ``ack_delay`` (those
    the session sends before the tool call, at once: its settings, then the SDK's tracing); the
    new agent's first audio comes ``audio_delay`` after its ``response.create``.
    """

    old_response_tail: float = 0.3
    ack_delay: float = 0.0
    audio_delay: float = 0.1
    received: list[str] = field(default_factory=list)  # client event types, in order
    url: str = ""
    _server: Any = None

    async def __aenter__(self) -> LoopbackRealtimeServer:
        import websockets

        self._server = await websockets.serve(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, websocket: Any) -> None:
        tasks: set[asyncio.Task[None]] = set()

        async def send(event: dict[str, Any]) -> None:
            await websocket.send(json.dumps(event))

        def later(coroutine: Awaitable[None]) -> None:
            task = asyncio.ensure_future(coroutine)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        called = asyncio.Event()  # the handoff's tool call has gone out

        async def first_response() -> None:
            await send({"type": "response.created", "event_id": "e2", "response": _response("resp_old")})
            await send(
                {
                    "type": "response.output_item.done",
                    "event_id": "e3",
                    "response_id": "resp_old",
                    "output_index": 0,
                    "item": {
                        "id": "item_call",
                        "type": "function_call",
                        "status": "completed",
                        "call_id": "call_billing",
                        "name": "transfer_to_billing",
                        "arguments": "{}",
                    },
                }
            )
            called.set()
            await asyncio.sleep(self.old_response_tail)
            await send(
                {"type": "response.done", "event_id": "e4", "response": _response("resp_old", "completed")}
            )

        async def acknowledge(event_id: str) -> None:
            await asyncio.sleep(self.ack_delay)
            await send({"type": "session.updated", "event_id": event_id, "session": _SESSION})

        async def new_response() -> None:
            await send({"type": "response.created", "event_id": "e5", "response": _response("resp_new")})
            await asyncio.sleep(self.audio_delay)
            await send(
                {
                    "type": "response.output_audio.delta",
                    "event_id": "e6",
                    "response_id": "resp_new",
                    "item_id": "item_audio",
                    "output_index": 0,
                    "content_index": 0,
                    "delta": base64.b64encode(b"\0\0" * 240).decode(),
                }
            )
            await send(
                {"type": "response.done", "event_id": "e7", "response": _response("resp_new", "completed")}
            )

        await send({"type": "session.created", "event_id": "e0", "session": _SESSION})
        updates = 0
        try:
            async for raw in websocket:
                kind = json.loads(raw)["type"]
                self.received.append(kind)
                if kind == "session.update":
                    updates += 1
                    if called.is_set():  # the handoff's: answered after ack_delay
                        later(acknowledge(f"e1_{updates}"))
                    else:  # the session's start (its settings, then the SDK's tracing): at once
                        await send(
                            {"type": "session.updated", "event_id": f"e1_{updates}", "session": _SESSION}
                        )
                    if updates == 1:
                        later(first_response())
                elif kind == "response.create":
                    later(new_response())
        except Exception:  # the client went away mid-message: the scenario is over
            pass
        finally:
            for task in tasks:
                task.cancel()


def _response(response_id: str, status: str = "in_progress") -> dict[str, Any]:
    return {"id": response_id, "object": "realtime.response", "status": status, "output": []}


async def run_websocket_realtime(server: LoopbackRealtimeServer, agent: RealtimeAgent[Any]) -> list[str]:
    session = await RealtimeRunner(agent).run(model_config={"url": server.url, "api_key": "offline-test-key"})
    async with session:
        return await talk_until_new_agent_speaks(session)
