"""A support line: triage answers the call and hands billing questions to billing.

Run as a LiveKit Agents worker, the way it is deployed:

    LIVEKIT_URL=ws://localhost:7880 LIVEKIT_API_KEY=... LIVEKIT_API_SECRET=... python agent.py start

It is dispatched explicitly (agent name ``support-line``) and ends the job when the caller hangs
up. ``AGENT_VAD=silero`` adds Silero's voice activity detection; ``AGENT_JOB_EXECUTOR=thread``
runs calls in threads of the worker process instead of a process each.

(Test harness: the models come from ``scripted.py``, where an app would import its providers'
plugins; the last lines hand the process to the test's measurements when asked.)
"""

import inspect
import os

from livekit.agents import (
    Agent,
    AgentServer,
    AgentSession,
    JobContext,
    JobExecutorType,
    JobProcess,
    RunContext,
    cli,
    function_tool,
)
from scripted import EndpointingSTT, ScriptedLLM, ToneTTS
from tones import TONES

MAX_CONCURRENT_CALLS = 4


class Triage(Agent):
    def __init__(self) -> None:
        super().__init__(
            instructions="Greet the caller and find out what they need.", tts=ToneTTS(TONES["triage"])
        )

    async def on_enter(self) -> None:
        self.session.say("Support line, how can I help you today?")

    @function_tool
    async def transfer_to_billing(self, context: RunContext) -> Agent:
        """Transfer the caller to billing, for invoices and payments."""
        return Billing()


class Billing(Agent):
    def __init__(self) -> None:
        super().__init__(instructions="Help the caller with their bill.", tts=ToneTTS(TONES["billing"]))

    async def on_enter(self) -> None:
        self.session.generate_reply(instructions="Tell the caller you can help with their bill.")


def active_calls(server: AgentServer) -> float:
    """Load by calls, not CPU: a busy 2-core machine still takes its few calls."""
    return len(server.active_jobs) / MAX_CONCURRENT_CALLS


def prewarm(proc: JobProcess) -> None:
    if os.environ.get("AGENT_VAD") == "silero":
        from livekit.plugins import silero

        proc.userdata["vad"] = silero.VAD.load()


executor = (
    JobExecutorType.THREAD if os.environ.get("AGENT_JOB_EXECUTOR") == "thread" else JobExecutorType.PROCESS
)
# the agent's name is the server's in livekit-agents 2.0, its rtc_session's in 1.x
NAMED = {"agent_name": "support-line"}
NAMED_ON_SESSION = "agent_name" in inspect.signature(AgentServer.rtc_session).parameters
server = AgentServer(
    setup_fnc=prewarm,
    load_fnc=active_calls,
    job_executor_type=executor,
    **({} if NAMED_ON_SESSION else NAMED),
)


@server.rtc_session(**(NAMED if NAMED_ON_SESSION else {}))
async def entrypoint(ctx: JobContext) -> None:
    vad = ctx.proc.userdata.get("vad")
    session = AgentSession(
        stt=EndpointingSTT("I have a question about my bill."),
        llm=ScriptedLLM(tool_calls=["transfer_to_billing"]),
        vad=vad,
        turn_handling={"turn_detection": "vad" if vad else "stt"},
    )

    @session.on("close")
    def _caller_left(event: object) -> None:
        ctx.shutdown(reason="the call ended")

    await session.start(agent=Triage(), room=ctx.room)


if os.environ.get("LIVEKIT_CALL_MEASUREMENTS"):  # test harness only: times frames, not tracing
    import measure

    measure.install(server)

if __name__ == "__main__":
    cli.run_app(server)
