"""One run per framework of completed, skipped, rejected and failed handoffs, on the real frameworks
offline: what the dashboard's queries (a real Prometheus) and the Jaeger tests read back.

Each run is synchronous (it runs its own event loop) and uses whatever instrumentation and
providers the caller set up.
"""

from __future__ import annotations

from typing import Any

import pytest


def livekit_handoffs() -> None:
    """Two completed handoffs, and one the closing session skips."""
    import asyncio

    from livekit.agents import AgentSession
    from lk_agents import Billing, Support

    from otel_handoff.cli.offline.livekit import ScriptedLLM

    async def run() -> None:
        session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Billing())
        try:
            for agent in (Support(), Billing()):
                session.update_agent(agent)
                await asyncio.wait_for(agent.entered.wait(), 10)
        finally:
            session.update_agent(Support())  # the session closes before it lands: skipped
            await session.aclose()

    asyncio.run(run())


def ag2_handoffs() -> None:
    """A workflow channel's handoffs, and a classic group chat whose selector fails: an error."""
    import asyncio

    from ag2_chats import run_chat
    from autogen.agentchat import groupchat

    from otel_handoff.cli.offline import ag2_network
    from otel_handoff.cli.offline.ag2_classic import build_support_chat

    async def run() -> None:
        hub, recorder = await ag2_network.open_hub()
        try:
            await ag2_network.run_channel(hub, recorder, ag2_network.ping_pong(max_turns=3))
        finally:
            await hub.close()

    asyncio.run(run())
    select_speaker, calls = groupchat.GroupChat.select_speaker, [0]

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:  # right after a transfer was decided
            raise RuntimeError("selector down")
        return select_speaker(self, *args, **kwargs)

    groupchat.GroupChat.select_speaker = failing
    try:
        with pytest.raises(RuntimeError, match="selector down"):
            run_chat(build_support_chat())
    finally:
        groupchat.GroupChat.select_speaker = select_speaker


def pipecat_handoffs() -> None:
    """A transition, and one Flows never runs (a slower function call beside it): skipped."""
    import asyncio

    from pipecat.flows import FlowsFunctionSchema

    from otel_handoff.cli import demo_pipecat

    pf = demo_pipecat.pf
    asyncio.run(
        pf.run_flow(
            demo_pipecat._greeting(),
            ["Hello.", [("go_to_booking", {})], "Booked."],
            [pf.user_says("book")],
            until=lambda fm: fm.current_node == "booking" and not fm._llm.replies,
        )
    )

    async def slow(args: dict[str, Any], flow_manager: Any) -> Any:
        await asyncio.sleep(0.1)  # the work of a slow lookup: what the transition waits behind
        return {"status": "ok"}

    greeting = demo_pipecat._greeting()
    greeting["functions"].append(
        FlowsFunctionSchema(name="lookup", description="", properties={}, required=[], handler=slow)
    )
    asyncio.run(
        pf.run_flow(
            greeting,
            ["Hello.", [("go_to_booking", {}), ("lookup", {})], "Done."],
            [pf.user_says("book")],
            until=lambda fm: not fm._llm.replies,
        )
    )


def openai_agents_handoffs() -> None:
    """A chain of two, one rejected (two asked for at once), one failed (a raising on_handoff)."""
    import asyncio

    from otel_handoff.cli.offline import openai_agents as oa

    oa.quiet_sdk_tracing()

    async def run() -> None:
        await oa.run_text(oa.TextScenario(chain=True))
        await oa.run_text(oa.TextScenario(several=True))
        with pytest.raises(LookupError):
            await oa.run_text(oa.TextScenario(raising_on_handoff=True))

    asyncio.run(run())


def langgraph_handoffs() -> None:
    """A swarm handoff and a supervisor delegation with its hand-back; one to a node the graph
    lacks (LangGraph ignores it): rejected; a raising handoff tool: an error."""
    import asyncio

    from langgraph.graph import START, MessagesState, StateGraph

    from otel_handoff.cli.offline import langgraph as lg

    asyncio.run(lg.run_async(lg.swarm(triage_latency=0.0, billing_latency=0.0)))
    lg.run_sync(lg.supervisor(supervisor_latency=0.0, billing_latency=0.0))
    asyncio.run(lg.run_async(lg.fan_out_graph("nobody"), thread=None))
    builder = StateGraph(MessagesState)
    builder.add_node(lg.raising_handoff_agent())
    builder.add_edge(START, "triage")
    with pytest.raises(RuntimeError):
        lg.run_sync(builder.compile(), thread=None)


def llama_index_handoffs() -> None:
    """An AgentWorkflow handoff; one to an agent the workflow lacks: rejected; a new agent whose
    model fails: an error."""
    import asyncio

    from otel_handoff.cli.offline import llama_index as li

    answer = {"text": "Paid."}
    asyncio.run(
        li.run(li.make_workflow([li.handoff_call("billing", "call-1")], [answer], latency=0.0), "Why?")
    )
    refused = li.make_workflow([li.handoff_call("refunds", "call-2"), answer], [], latency=0.0)
    asyncio.run(li.run(refused, "Refund"))
    with pytest.raises(IndexError):  # billing's script is empty
        asyncio.run(li.run(li.make_workflow([li.handoff_call("billing", "call-3")], [], latency=0.0), "Why?"))


def agent_framework_handoffs() -> None:
    """A HandoffBuilder handoff, with a checkpoint; one whose target the app's termination condition
    keeps from running: rejected; a target whose model fails: an error."""
    import asyncio

    from agent_framework import InMemoryCheckpointStorage

    from otel_handoff.cli.offline import agent_framework as af

    asyncio.run(af.stream(af.support(latency=0.0, checkpoint_storage=InMemoryCheckpointStorage())[0]))
    checks: list[int] = []
    ends = af.support(latency=0.0, termination_condition=lambda _: bool(checks.append(1)) or len(checks) > 1)
    asyncio.run(af.stream(ends[0]))
    with pytest.raises(LookupError):
        asyncio.run(af.stream(af.support(billing=[{"raise": LookupError("down")}], latency=0.0)[0]))


FRAMEWORK_RUNS = {
    "livekit-agents": livekit_handoffs,
    "ag2": ag2_handoffs,
    "pipecat-flows": pipecat_handoffs,
    "openai-agents": openai_agents_handoffs,
    "langgraph": langgraph_handoffs,
    "llama-index": llama_index_handoffs,
    "agent-framework": agent_framework_handoffs,
}


def framework_instrumentors() -> list[Any]:
    """The instrumentor of every framework FRAMEWORK_RUNS runs."""
    from otel_handoff.ag2 import AG2HandoffInstrumentor
    from otel_handoff.agent_framework import AgentFrameworkHandoffInstrumentor
    from otel_handoff.langgraph import LangGraphHandoffInstrumentor
    from otel_handoff.livekit import LiveKitHandoffInstrumentor
    from otel_handoff.llama_index import LlamaIndexHandoffInstrumentor
    from otel_handoff.openai_agents import OpenAIAgentsHandoffInstrumentor
    from otel_handoff.pipecat import PipecatFlowsHandoffInstrumentor

    return [
        LiveKitHandoffInstrumentor,
        AG2HandoffInstrumentor,
        PipecatFlowsHandoffInstrumentor,
        OpenAIAgentsHandoffInstrumentor,
        LangGraphHandoffInstrumentor,
        LlamaIndexHandoffInstrumentor,
        AgentFrameworkHandoffInstrumentor,
    ]
