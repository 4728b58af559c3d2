"""An unmodified LiveKit agent (no tracing code), run offline: a tool transfer, then exit.

Used by the auto-instrumentation tests as a user's `agent.py`. `--otel-handoff-first` imports
an otel_handoff module before livekit.agents (for the offline model edges); by default
livekit.agents is imported first.
"""

import asyncio
import sys

if "--otel-handoff-first" in sys.argv:
    from otel_handoff.cli.offline.livekit import ScriptedLLM  # noqa: I001
    from livekit.agents import Agent, AgentSession, function_tool
else:
    from livekit.agents import Agent, AgentSession, function_tool

    from otel_handoff.cli.offline.livekit import ScriptedLLM


class Billing(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You handle billing.")


class Triage(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="You route the caller.")

    @function_tool
    async def transfer(self) -> Agent:
        """Transfer to billing."""
        return Billing()


async def main() -> None:
    session = AgentSession(llm=ScriptedLLM(tool_calls=["transfer"]))
    await session.start(agent=Triage())
    await session.run(user_input="billing please")
    await session._update_activity_atask
    print("current agent:", type(session.current_agent).__name__)
    await session.aclose()


if __name__ == "__main__":
    asyncio.run(main())
