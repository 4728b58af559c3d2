"""Python work between handoffs: what we add per streamed event, token or audio chunk.

A handoff happens a few times per call; an audio chunk 50 times a second. For each continuous path
of a framework, a real offline scenario runs with N1 and with N2 events on that path,
uninstrumented (**A**) and instrumented on an SDK ``TracerProvider`` with NoOp meters (**C**);
the difference between the two sizes, divided by N2 - N1, is the work per event, free of the
scenario's fixed cost. The unit is bytecode instructions under ``sys.settrace``, which machine load
does not move. Each path runs in each state where it runs: no handoff in flight, after one.

Goal (issue 29): (C - A) per event <= 1.0 % of A per event, on every path, in every state.

    python bench/between_handoffs.py                           # LangGraph, LlamaIndex, Agent Framework
    .venv-google-adk/bin/python bench/between_handoffs.py      # Google ADK (its own environment)
    .venv-strands/bin/python bench/between_handoffs.py         # Strands Agents (likewise)

Each run measures the frameworks installed where it runs and keeps the others' last rows.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from frameworks_overhead import opcodes, publish  # run from bench/, as its siblings are
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.trace import TracerProvider

RESULTS = Path(__file__).resolve().parent / "results"
GOAL = 0.01  # of the framework's own work per event
N1, N2 = 40, 120


@dataclass
class Path_:
    """One continuous path in one state: ``run(n)`` makes n events on it."""

    framework: str
    path: str
    state: str
    run: Callable[[int], Awaitable[Any]]
    instrumentor: Callable[[], Any]


def _paths() -> list[Path_]:
    found: list[Path_] = []
    try:
        from otel_handoff.cli.offline import openai_agents as oa
        from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor

        oa.quiet_sdk_tracing()
        sdk = OpenAIAgentsHandoffInstrumentor
        found += [
            Path_("openai-agents", "text, each streamed delta", "no handoff", _openai_text(False), sdk),
            Path_("openai-agents", "text, each streamed delta", "after a handoff", _openai_text(True), sdk),
            Path_("openai-agents", "realtime, each audio delta", "no handoff", _openai_audio(False), sdk),
            Path_("openai-agents", "realtime, each audio delta", "after a handoff", _openai_audio(True), sdk),
            Path_("openai-agents", "realtime, each send_audio", "no handoff", _openai_send(), sdk),
        ]
    except ImportError:
        pass
    try:
        from langchain_core.messages import AIMessage

        from otel_handoff.cli.offline import langgraph as lg
        from otel_handoff.langgraph import LangGraphHandoffInstrumentor

        def tokens(transfer: bool) -> Callable[[int], Awaitable[Any]]:
            """n streamed tokens of an answer (stream_mode="messages"), by billing after a handoff."""

            async def run(n: int) -> None:
                if transfer:
                    graph = lg.swarm(triage_latency=0.0, billing_latency=0.0, billing_words=n)
                else:
                    model = lg.ScriptedChatModel(
                        who="solo", script=[AIMessage(content=" ".join(["w"] * n))], latency=0.0
                    )
                    graph = _single(lg.agent("solo", model, [], "s"))
                await lg.run_async(graph, stream_mode="messages")

            return run

        def steps(transfer: bool) -> Callable[[int], Awaitable[Any]]:
            """n node steps: a chain of n plain nodes after the agents (after a handoff: the swarm's)."""

            async def run(n: int) -> None:
                await lg.run_async(_chain(n, transfer))

            return run

        lang = LangGraphHandoffInstrumentor
        found += [
            Path_("langgraph", "each streamed token", "no handoff", tokens(False), lang),
            Path_("langgraph", "each streamed token", "after a handoff", tokens(True), lang),
            Path_("langgraph", "each node step", "no handoff", steps(False), lang),
            Path_("langgraph", "each node step", "after a handoff", steps(True), lang),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.llama_index import LlamaIndexHandoffInstrumentor

        llama = LlamaIndexHandoffInstrumentor
        found += [
            Path_("llama-index", "each streamed chunk", "no handoff", _llama_chunks(False), llama),
            Path_("llama-index", "each streamed chunk", "after a handoff", _llama_chunks(True), llama),
            Path_("llama-index", "each agent step (a tool call)", "no handoff", _llama_steps(False), llama),
            Path_(
                "llama-index", "each agent step (a tool call)", "after a handoff", _llama_steps(True), llama
            ),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.agent_framework import AgentFrameworkHandoffInstrumentor

        maf = AgentFrameworkHandoffInstrumentor
        turn = "each user turn answered (its supersteps, no handoff)"
        found += [
            Path_("agent-framework", "each streamed update", "no handoff", _maf_updates(False), maf),
            Path_("agent-framework", "each streamed update", "after a handoff", _maf_updates(True), maf),
            Path_("agent-framework", turn, "no handoff", _maf_runs(False), maf),
            Path_("agent-framework", turn, "after a handoff", _maf_runs(True), maf),
        ]
    except ImportError:
        pass
    try:  # in Strands' own environment (.venv-strands)
        from otel_handoff.strands import StrandsHandoffInstrumentor

        swarm = StrandsHandoffInstrumentor
        found += [
            Path_("strands", "each streamed token", "no handoff", _strands_tokens(False), swarm),
            Path_("strands", "each streamed token", "after a handoff", _strands_tokens(True), swarm),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.ag2 import AG2HandoffInstrumentor

        envelope = "each envelope (consulting exchanges: invite, opened, question, reply)"
        found += [
            Path_("ag2", envelope, "no handoff", _ag2_envelopes(False), AG2HandoffInstrumentor),
            Path_("ag2", envelope, "after a handoff", _ag2_envelopes(True), AG2HandoffInstrumentor),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.livekit import LiveKitHandoffInstrumentor

        kit = LiveKitHandoffInstrumentor
        turn, chunk = "each turn (a user input and its reply)", "each LLM chunk"
        first = "the new agent's first reply"
        found += [
            Path_("livekit", turn, "no handoff", _livekit(False), kit),
            Path_("livekit", turn, "after a handoff", _livekit(True), kit),
            Path_("livekit", chunk, "no handoff", _livekit(False, chunks=True), kit),
            Path_("livekit", chunk, first, _livekit(True, chunks=True), kit),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.cli import demo_pipecat  # noqa: F401 (imported first, it quiets Pipecat's logger)
        from otel_handoff.pipecat import PipecatFlowsHandoffInstrumentor

        flows = PipecatFlowsHandoffInstrumentor
        frame = "each audio frame (the caller's, through the pipeline)"
        chunk = "each TTS audio chunk (the bot's, written by a transport output's media sender)"
        found += [
            Path_("pipecat-flows", frame, "no handoff", _pipecat_audio("no handoff"), flows),
            Path_("pipecat-flows", frame, "after a handoff", _pipecat_audio("after a handoff"), flows),
            Path_("pipecat-flows", frame, "awaiting first speech", _pipecat_audio("awaiting"), flows),
            Path_("pipecat-flows", chunk, "no handoff", _pipecat_speech(False), flows),
            Path_("pipecat-flows", chunk, "after a handoff", _pipecat_speech(True), flows),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.pipecat import PipecatHandoffInstrumentor

        workers = PipecatHandoffInstrumentor
        frame = "each audio frame (the caller's, across the bus to the active agent and back)"
        found += [
            Path_("pipecat-workers", frame, "no handoff", _pipecat_workers("no handoff"), workers),
            Path_("pipecat-workers", frame, "after a handoff", _pipecat_workers("after a handoff"), workers),
            Path_("pipecat-workers", frame, "awaiting first output", _pipecat_workers("awaiting"), workers),
        ]
    except ImportError:
        pass
    try:
        from otel_handoff.cli.offline import google_adk as ga
        from otel_handoff.google_adk import GoogleADKHandoffInstrumentor

        def text(transfer: bool) -> Callable[[int], Awaitable[Any]]:
            async def run(n: int) -> None:
                if transfer:  # billing streams its answer after the transfer
                    root = ga.text_agents(triage_latency=0.0, billing_latency=0.0, instructions_delay=0.0)
                    root.sub_agents[0].model.script = [ga.streamed_reply(n)]
                else:
                    from google.adk.agents import LlmAgent

                    model = ga.ScriptedLlm(model="t", script=[ga.streamed_reply(n)], latency=0.0)
                    root = LlmAgent(name="triage", model=model)
                await ga.run_text(root, streaming=True)

            return run

        def live(transfer: bool) -> Callable[[int], Awaitable[Any]]:
            async def run(n: int) -> None:
                if transfer:
                    agents = ga.live_agents(
                        connect_delay=0.0, first_audio_delay=0.0, billing_chunks=n, spacing=0.0
                    )
                    await ga.run_live(agents)
                else:
                    agents = ga.live_agents(target=None, connect_delay=0.0, triage_chunks=n, spacing=0.0)
                    await ga.run_live(agents, until_turn_of="triage")

            return run

        adk = GoogleADKHandoffInstrumentor
        found += [
            Path_("google-adk", "text, each streamed (SSE) event", "no handoff", text(False), adk),
            Path_("google-adk", "text, each streamed (SSE) event", "after a transfer", text(True), adk),
            Path_("google-adk", "live, each audio chunk", "no handoff", live(False), adk),
            Path_("google-adk", "live, each audio chunk", "after a transfer", live(True), adk),
        ]
    except ImportError:
        pass
    return found


def _openai_text(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """A streamed run whose answer comes as n deltas (n content parts), by billing after a handoff."""
    from agents import Agent, Runner
    from agents.testing import ModelStep, ScriptedModel, function_call
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    def answer(n: int) -> Any:
        parts = [ResponseOutputText(text="w ", annotations=[], type="output_text") for _ in range(n)]
        return ResponseOutputMessage(
            id="msg", content=parts, role="assistant", status="completed", type="message"
        )

    async def run(n: int) -> None:
        speaker = Agent(name="billing", model=ScriptedModel([ModelStep(output=[answer(n)])]))
        agent = speaker
        if transfer:
            agent = Agent(
                name="triage",
                handoffs=[speaker],
                model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="c1")]]),
            )
        result = Runner.run_streamed(agent, "hello")
        async for _ in result.stream_events():
            pass

    return run


def _openai_audio(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """n audio deltas into a realtime session (each with its raw server event, as the websocket
    model sends them), from the first agent or from billing after a handoff."""
    from agents.realtime import RealtimeRunner
    from agents.realtime.model_events import RealtimeModelAudioEvent, RealtimeModelRawServerEvent

    from otel_handoff.cli.offline import openai_agents as oa

    async def run(n: int) -> None:
        model = oa.LatentRealtimeModel(ack_delay=0.0, old_response_tail=0.0, audio_delay=0.0)
        session = await RealtimeRunner(oa.realtime_agents(), model=model).run()
        async with session:
            if transfer:
                asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(model.ask_for_billing()))
                await oa.talk_until_new_agent_speaks(session)
            for i in range(n):
                await model.emit(
                    RealtimeModelRawServerEvent(data={"type": "response.output_audio.delta"}),
                    RealtimeModelAudioEvent(
                        data=b"\0\0" * 240, response_id="r", item_id="a", content_index=i
                    ),
                )
            seen = 0
            async for event in session:
                seen += event.type == "audio"
                if seen >= n:
                    break

    return run


def _openai_send() -> Callable[[int], Awaitable[Any]]:
    """n ``send_audio`` calls of the app into a realtime session."""
    from agents.realtime import RealtimeRunner

    from otel_handoff.cli.offline import openai_agents as oa

    async def run(n: int) -> None:
        model = oa.LatentRealtimeModel(ack_delay=0.0, old_response_tail=0.0, audio_delay=0.0)
        session = await RealtimeRunner(oa.realtime_agents(), model=model).run()
        async with session:
            for _ in range(n):
                await session.send_audio(b"\0\0" * 240)

    return run


def _ag2_envelopes(handoff: bool) -> Callable[[int], Awaitable[Any]]:
    """n envelopes on an AG2 hub: consulting channels of 4 envelopes each (our hub hooks see every
    channel type); with ``handoff``, after a workflow channel's rule handoffs on the same hub."""
    from ag2 import Agent
    from ag2.network import EV_CHANNEL_CLOSED
    from ag2.network.adapters.consulting import CONSULTING_TYPE
    from ag2.testing import TestConfig

    from otel_handoff.cli.offline import ag2_network as an

    per_exchange = 4

    async def run(n: int) -> None:
        hub, recorder = await an.open_hub()
        try:
            if handoff:
                await an.run_channel(hub, recorder, an.ping_pong(max_turns=2))
            exchanges = n // per_exchange
            asker = await hub.register(Agent(name="asker", config=TestConfig("unused")))
            expert = await hub.register(Agent(name="expert", config=TestConfig(*["answer"] * exchanges)))
            for i in range(exchanges):
                channel = await asker.open(type=CONSULTING_TYPE, target=[expert.agent_id])
                await channel.send(f"question {i}")
                await asker.wait_for_channel_event(
                    channel_id=channel.channel_id,
                    predicate=lambda e: e.event_type == EV_CHANNEL_CLOSED,
                    timeout=an.CLOSE_TIMEOUT,
                )
        finally:
            await hub.close()

    return run


def _livekit(handoff: bool, *, chunks: bool = False) -> Callable[[int], Awaitable[Any]]:
    """A text session: n user turns, or one reply of n LLM chunks; with ``handoff``, after an
    ``update_agent`` (its new agent's first reply is the one streamed)."""
    from livekit.agents import Agent, AgentSession, llm, utils

    from otel_handoff.cli.offline.livekit import ScriptedLLM, ScriptedLLMStream, settle

    class ChunkedStream(ScriptedLLMStream):
        chunks = 1

        async def _run(self) -> None:
            for _ in range(self.chunks):
                delta = llm.ChoiceDelta(role="assistant", content="word ")
                self._event_ch.send_nowait(llm.ChatChunk(id=utils.shortuuid("chunk_"), delta=delta))

    class ChunkedLLM(ScriptedLLM):
        def __init__(self, chunks: int) -> None:
            super().__init__()
            self.chunks = chunks

        def chat(self, **kwargs: Any) -> ScriptedLLMStream:
            stream = super().chat(**kwargs)
            stream.__class__ = ChunkedStream
            stream.chunks = self.chunks  # type: ignore[attr-defined]
            return stream

    class Desk(Agent):
        def __init__(self) -> None:
            super().__init__(instructions="Help.")

    async def run(n: int) -> None:
        session = AgentSession(llm=ChunkedLLM(n if chunks else 1))
        await session.start(agent=Desk())
        if handoff:
            session.update_agent(Desk())
            await settle(session)  # the handoff and the new agent's on_enter
        for _ in range(1 if chunks else n):
            await session.generate_reply(user_input="hi")
        await session.aclose()

    return run


def _pipecat_audio(state: str) -> Callable[[int], Awaitable[Any]]:
    """n audio frames of the caller through a Flows pipeline: before any transition, after one
    whose new node spoke, or while one awaits the bot's first speech (its node waits for the user)."""
    from pipecat.flows import FlowsFunctionSchema
    from pipecat.frames.frames import InputAudioRawFrame

    from otel_handoff.cli.offline import pipecat_flows as pf

    def audio(n: int) -> Any:
        async def step(flow_manager: Any, worker: Any) -> None:
            chunk = b"\0\0" * 320  # 20 ms at 16 kHz
            frames = [InputAudioRawFrame(audio=chunk, sample_rate=16000, num_channels=1) for _ in range(n)]
            await worker.queue_frames(frames)

        return step

    def greeting() -> dict[str, Any]:
        target = {
            "name": "next",
            "task_messages": [{"role": "developer", "content": "Help."}],
            "respond_immediately": state != "awaiting",
        }

        async def go(args: Any, flow_manager: Any) -> tuple[Any, Any]:
            return {"status": "ok"}, target

        schema = FlowsFunctionSchema(name="go_next", description="On", properties={}, required=[], handler=go)
        return {
            "name": "greeting",
            "task_messages": [{"role": "developer", "content": "Greet."}],
            "functions": [schema],
        }

    async def run(n: int) -> None:
        output = pf.SpeakerOutput()
        if state == "no handoff":
            steps, replies = [audio(n)], ["Hello."]
        else:
            spoken = [] if state == "awaiting" else ["Done."]  # awaiting: the new node stays silent
            steps, replies = [pf.user_says("on"), audio(n)], ["Hello.", [("go_next", {})], *spoken]
        await pf.run_flow(greeting(), replies, steps, until=lambda _: output.audio_in >= n, output=output)

    return run


def _pipecat_speech(handoff: bool) -> Callable[[int], Awaitable[Any]]:
    """n chunks of the bot's speech written by Pipecat's own ``BaseOutputTransport`` media sender
    (a null sink: no device, no network), each starting (or going on with) its run of speech: the
    greeting's answer, or, after a transition whose new node has spoken, that node's next answer.
    Without the sender's ``BotSpeakingFrame`` every 0.2 s of wall time, so the count is the same
    however fast the machine runs."""
    from pipecat.flows import FlowsFunctionSchema

    from otel_handoff.cli.offline import pipecat_flows as pf

    target = {"name": "next", "task_messages": [{"role": "developer", "content": "Help."}]}

    async def go(args: Any, flow_manager: Any) -> tuple[Any, Any]:
        return {"status": "ok"}, target

    schema = FlowsFunctionSchema(name="go_next", description="On", properties={}, required=[], handler=go)
    greeting = {
        "name": "greeting",
        "task_messages": [{"role": "developer", "content": "Greet."}],
        "functions": [schema],
    }

    async def run(n: int) -> None:
        answer = "w" * 2 * n  # the scripted TTS makes 20 ms of audio a character: n chunks of 40 ms
        if handoff:
            steps, replies = (
                [pf.user_says("on"), pf.user_says("more")],
                ["Hi.", [("go_next", {})], "Ok.", answer],
            )
        else:
            steps, replies = [], [answer]
        await pf.run_flow(
            greeting,
            replies,
            steps,
            until=lambda flow_manager: not flow_manager._llm.replies,
            output=pf.SpeakerOutput(speaks=False),
            transport=pf.NullTransportOutput(speaking_frames=False),
        )

    return run


def _pipecat_workers(state: str) -> Callable[[int], Awaitable[Any]]:
    """n audio frames of the caller through the session's bridge, across the bus to the active
    agent's edges and back: before any handoff, after one whose new agent spoke, or while one awaits
    the new agent's first output (it stays silent)."""
    from pipecat.frames.frames import InputAudioRawFrame

    from otel_handoff.cli.offline import pipecat_workers as pw

    def audio(n: int) -> Any:
        async def then(session: Any, output: Any) -> None:
            chunk = b"\0\0" * 320  # 20 ms at 16 kHz
            seen = output.audio_in
            await session.queue_frames(
                [InputAudioRawFrame(audio=chunk, sample_rate=16000, num_channels=1) for _ in range(n)]
            )
            await output.progress.until(lambda: output.audio_in >= seen + n, "the audio never came back")

        return then

    async def run(n: int) -> None:
        if state == "no handoff":
            agents, says, until = {"triage": ["Hello."], "billing": []}, ["hi"], None
        else:
            billing = [] if state == "awaiting" else ["Billing here."]
            agents = {
                "triage": ["Hello.", ("Over to billing.", [("transfer_to", {"agent": "billing"})])],
                "billing": billing,
            }
            says, until = ["hi", "billing please"], (None if state == "awaiting" else "billing")
        await pw.run_workers(agents, says, until_active=until, then=audio(n), realtime=False)

    return run


def _llama_chunks(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """n streamed chunks of an answer (``stream_events()``), by billing after a handoff."""
    from otel_handoff.cli.offline import llama_index as li

    async def run(n: int) -> None:
        answer = {"text": " ".join(["w"] * n)}
        if transfer:
            workflow = li.make_workflow([li.handoff_call("billing", "call-1")], [answer], latency=0.0)
        else:
            workflow = li.make_workflow([answer], [], latency=0.0)
        await li.run(workflow, "Why?")

    return run


def _llama_steps(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """n agent steps, each a call of a plain tool (after a handoff: billing's)."""
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent

    from otel_handoff.cli.offline import llama_index as li

    def lookup(invoice: str) -> str:
        """Look an invoice up."""
        return "paid"

    async def run(n: int) -> None:
        steps = [{"tool": "lookup", "id": f"call-{i}", "args": {"invoice": "42"}} for i in range(n)]
        answer = {"text": "Paid."}
        script = [li.handoff_call("billing", "call-h")] if transfer else [*steps, answer]
        triage = FunctionAgent(
            name="triage",
            description="Routes.",
            llm=li.ScriptedLLM(script, latency=0.0),
            tools=[lookup],
            can_handoff_to=["billing"],
        )
        billing = FunctionAgent(
            name="billing",
            description="Invoices.",
            llm=li.ScriptedLLM([*steps, answer], latency=0.0),
            tools=[lookup],
        )
        workflow = AgentWorkflow(agents=[triage, billing], root_agent="triage")
        await li.run(workflow, "Why?", max_iterations=10 * n)

    return run


def _strands_tokens(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """A swarm whose answering agent streams n words: triage itself, or billing after a handoff
    (with triage's drain)."""
    from otel_handoff.cli.offline import strands as st

    async def run(n: int) -> None:
        answer = {"text": " ".join(["word"] * n)}
        if transfer:
            swarm = st.swarm([{"handoff": "billing"}, {"text": "Over to billing."}], [answer], latency=0.0)
        else:
            swarm = st.swarm([answer], latency=0.0)
        await st.stream(swarm)

    return run


def _maf_updates(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """A HandoffBuilder workflow whose answering agent streams n words: triage itself, or billing
    after a handoff."""
    from otel_handoff.cli.offline import agent_framework as af

    async def run(n: int) -> None:
        answer = [{"text": " ".join(["word"] * n)}]
        if transfer:
            workflow = af.support(billing=answer, latency=0.0)[0]
        else:
            workflow = af.support(triage=answer, latency=0.0)[0]
        await af.stream(workflow)

    return run


def _maf_runs(transfer: bool) -> Callable[[int], Awaitable[Any]]:
    """n user turns answered by one agent (each a run of a few supersteps and one model call, no
    handoff): the start agent's own, or billing's after a first run with a handoff."""
    from agent_framework import Message

    from otel_handoff.cli.offline import agent_framework as af

    async def run(n: int) -> None:
        answers = [{"text": "ok"}] * (n + 1)
        if transfer:
            workflow = af.support(billing=answers, latency=0.0)[0]
        else:
            workflow = af.support(answers, latency=0.0)[0]
        # a run answering a request goes on counting the supersteps of the runs before: room for n
        workflow._runner._max_iterations = 10 * n + 100
        events = await af.stream(workflow)
        for _ in range(n):
            [request] = [e for e in events if e.type == "request_info"]
            answer = {request.request_id: [Message("user", ["more"])]}
            events = [e async for e in workflow.run(stream=True, responses=answer)]

    return run


def _single(agent: Any) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    builder = StateGraph(MessagesState)
    builder.add_node(agent)
    builder.add_edge(START, agent.name)
    return builder.compile(checkpointer=InMemorySaver())


def _chain(n: int, transfer: bool) -> Any:
    """A graph of n plain nodes one after another; with ``transfer``, after a swarm's handoff."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, MessagesState, StateGraph

    from otel_handoff.cli.offline import langgraph as lg

    builder = StateGraph(MessagesState)
    previous = START
    if transfer:
        builder.add_node("team", lg.swarm(triage_latency=0.0, billing_latency=0.0, checkpointer=False))
        builder.add_edge(START, "team")
        previous = "team"
    for i in range(n):
        builder.add_node(f"step{i}", lambda state: {})
        builder.add_edge(previous, f"step{i}")
        previous = f"step{i}"
    return builder.compile(checkpointer=InMemorySaver())


def _per_event(path: Path_, runs: int) -> float:
    def size(n: int) -> float:
        return statistics.median(opcodes(lambda: asyncio.run(path.run(n))) for _ in range(runs))

    return (size(N2) - size(N1)) / (N2 - N1)


def _times_per_event(path: Path_, runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU µs per event, one figure per run (untraced: what a machine pays, loaded or not)."""
    walls, cpus = [], []
    for _ in range(runs):
        spent = {}
        for n in (N1, N2):
            wall, cpu = time.perf_counter_ns(), time.process_time_ns()
            asyncio.run(path.run(n))
            spent[n] = (time.perf_counter_ns() - wall, time.process_time_ns() - cpu)
        walls.append((spent[N2][0] - spent[N1][0]) / (N2 - N1) / 1e3)
        cpus.append((spent[N2][1] - spent[N1][1]) / (N2 - N1) / 1e3)
    return walls, cpus


def measure(path: Path_, runs: int) -> dict[str, Any]:
    asyncio.run(path.run(N1))  # warm-up: imports, caches
    plain = _per_event(path, runs)
    plain_wall, plain_cpu = _times_per_event(path, runs)
    instrumentor = path.instrumentor()
    provider = TracerProvider()
    instrumentor.instrument(tracer_provider=provider, meter_provider=NoOpMeterProvider(), skip_dep_check=True)
    try:
        asyncio.run(path.run(N1))
        traced = _per_event(path, runs)
        traced_wall, traced_cpu = _times_per_event(path, runs)
    finally:
        instrumentor.uninstrument()
    return {
        "wall_us": {"A": _range(plain_wall), "C": _range(traced_wall)},
        "cpu_us": {"A": _range(plain_cpu), "C": _range(traced_cpu)},
        "framework": path.framework,
        "path": path.path,
        "state": path.state,
        "A": plain,
        "C": traced,
        "C-A": traced - plain,
        "share": (traced - plain) / plain,
    }


def _range(values: list[float]) -> list[float]:
    return [round(min(values), 2), round(max(values), 2)]


def _shown(spread: dict[str, list[float]] | None) -> str:
    if not spread:
        return "n/a"
    return " / ".join(f"{low:.1f} to {high:.1f}" for low, high in (spread["A"], spread["C"]))


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| framework | path | state | A per event | C per event | C - A | share | goal "
        "| wall µs A / C | CPU µs A / C |",
        "|---|---|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        mark = "✅" if r["share"] <= GOAL else "❌"
        lines.append(
            f"| {r['framework']} | {r['path']} | {r['state']} | {r['A']:,.0f} | {r['C']:,.0f} "
            f"| {r['C-A']:+,.0f} | {r['share']:.2%} | ≤ {GOAL:.1%} {mark} "
            f"| {_shown(r.get('wall_us'))} | {_shown(r.get('cpu_us'))} |"
        )
    lines.append("")
    lines.append(
        f"Opcodes per event: medians of the runs, (size {N2} - size {N1}) / {N2 - N1}. Wall and CPU "
        "per event: the range over the runs, untraced; they move with the machine's load, so the "
        "goal is in opcodes."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--framework", help="measure only this framework's paths (keep the others' rows)")
    args = parser.parse_args(argv)
    paths = [p for p in _paths() if args.framework in (None, p.framework)]
    rows = [measure(path, args.runs) for path in paths]
    publish("between_handoffs", "Python work between handoffs, per event", rows, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
