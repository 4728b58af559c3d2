"""A real multi-agent LiveKit ``AgentSession``, run offline and traced: ``otel-handoff demo``.

Nothing is mocked between the agents: the framework runs its own handoff path (tool
transfers, an AgentTask entering and handing back, ``update_agent()`` calls, STT and
realtime-session reuse). Only the model edges are offline fakes (:mod:`otel_handoff.cli.offline.livekit`),
so it needs no room, no server and no keys.
Where the spans go is :mod:`otel_handoff.cli.demo_export`, shared with the AG2 demo.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Awaitable
from typing import Any, TypeVar

from livekit.agents import Agent, AgentTask, function_tool, telemetry

try:  # 2.0: `AgentSession` is a deprecated alias of `LiveSession`
    from livekit.agents import LiveSession as AgentSession
except ImportError:
    from livekit.agents import AgentSession

from ..livekit import LiveKitHandoffInstrumentor
from .demo_export import DEFAULT_SERVICE_NAME, DemoResult, DemoSetupError, DemoTracing, write_otlp_json
from .offline.livekit import IdleRealtimeModel, ScriptedLLM, SilentSTT, finish_task

__all__ = ["DEFAULT_SERVICE_NAME", "DemoResult", "DemoSetupError", "run_demo", "write_otlp_json"]

# a framework step that never comes means a broken demo: fail loudly instead of hanging
_STEP_TIMEOUT = 15.0
# simulated connection time of a fresh realtime session, so reuse visibly saves it
_REALTIME_CONNECT_DELAY = 0.03

T = TypeVar("T")


# --- agents ----------------------------------------------------------------------------------
class _DemoAgent(Agent):
    """An agent whose ``on_enter`` signals, so the demo awaits it instead of sleeping."""

    def __init__(self, *, instructions: str, **kwargs: Any) -> None:
        super().__init__(instructions=instructions, **kwargs)
        self.entered = asyncio.Event()

    async def on_enter(self) -> None:
        self.entered.set()


class Billing(_DemoAgent):
    """Receives the transfer and greets the caller (one scripted LLM turn)."""

    def __init__(self) -> None:
        super().__init__(instructions="You handle billing questions.")
        self.greeting: Awaitable[Any] | None = None

    async def on_enter(self) -> None:
        self.greeting = self.session.generate_reply(instructions="Greet the caller.")
        self.entered.set()


class CollectEmail(AgentTask[str]):
    """A task that takes over the conversation briefly and hands a result back."""

    def __init__(self) -> None:
        super().__init__(instructions="Collect the caller's email address.")

    async def on_enter(self) -> Any:
        return finish_task(self, "caller@example.com")


class Triage(_DemoAgent):
    """The first agent: collects an email with a task, then transfers to billing."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the front desk.")
        self.billing = Billing()

    @function_tool
    async def ask_email(self) -> str:
        """Collect the caller's email address with a task, then come back."""
        return await CollectEmail()

    @function_tool
    async def transfer(self) -> Agent:
        """Transfer the caller to billing."""
        return self.billing


class Concierge(_DemoAgent):
    """A realtime agent on the session's shared model."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the concierge.")


class Specialist(_DemoAgent):
    """A realtime agent on the same model as the concierge: its session is reused."""

    def __init__(self) -> None:
        super().__init__(instructions="You are the specialist.")


class Supervisor(_DemoAgent):
    """A realtime agent with a model of its own: it must open a new session."""

    def __init__(self) -> None:
        super().__init__(
            instructions="You are the supervisor.",
            llm=IdleRealtimeModel(mutable=True, connect_delay=_REALTIME_CONNECT_DELAY),
        )


# --- the conversations ----------------------------------------------------------------------
def _session_options() -> dict[str, Any]:
    """Options that keep an offline session quick on the releases that have them."""
    params = inspect.signature(AgentSession.__init__).parameters
    # no caller will speak again: do not wait for a last transcript when closing
    return {"session_close_transcript_timeout": 0.0} if "session_close_transcript_timeout" in params else {}


async def _step(awaitable: Awaitable[T], what: str) -> T:
    try:
        return await asyncio.wait_for(awaitable, _STEP_TIMEOUT)
    except asyncio.TimeoutError:
        raise RuntimeError(f"demo: {what} did not happen within {_STEP_TIMEOUT:.0f} s") from None


async def _pipeline_conversation(stt: SilentSTT) -> None:
    """Triage → CollectEmail (task) → Triage → Billing (tool transfer), sharing one STT."""
    session = AgentSession(
        llm=ScriptedLLM(tool_calls=["ask_email", "transfer"]), stt=stt, **_session_options()
    )
    triage = Triage()
    await session.start(agent=triage)
    try:
        # the scripted model calls ask_email, then transfer in its reply to the task's result
        await _step(session.run(user_input="Hi, I have a question about my invoice."), "the first turn")
        await _step(triage.billing.entered.wait(), "the transfer to billing")
        if triage.billing.greeting is not None:
            await _step(triage.billing.greeting, "billing's greeting")
    finally:
        await session.aclose()


async def _realtime_conversation(model: IdleRealtimeModel) -> None:
    """Concierge → Specialist (session reused) → Supervisor and back, queued back to back."""
    session = AgentSession(llm=model, **_session_options())
    await session.start(agent=Concierge())
    try:
        specialist = Specialist()
        session.update_agent(specialist)
        await _step(session._update_activity_atask, "the handoff to the specialist")
        await _step(specialist.entered.wait(), "the specialist's on_enter")

        # two handoffs requested at once: the second waits in the queue for the first
        session.update_agent(Supervisor())
        concierge = Concierge()
        session.update_agent(concierge)
        await _step(session._update_activity_atask, "the queued handoffs")
        await _step(concierge.entered.wait(), "the concierge's on_enter")
    finally:
        await session.aclose()


async def run_demo(*, export_path: str | os.PathLike[str] | None = None) -> DemoResult:
    """Run the offline conversations traced, and return their finished spans.

    Instruments livekit-agents for the duration of the run (it must not be instrumented
    already) and points LiveKit's own tracer at the same provider, so its spans share the
    traces. With an OTLP endpoint set, spans and metrics are exported the way
    :func:`otel_handoff.configure` exports them (the same ``OTEL_*`` variables, checked the same
    way, one warning per unreachable receiver); ``export_path`` also writes the spans as OTLP
    JSON Lines.
    """
    tracing = DemoTracing.create(export_path)
    # LiveKit's own spans in the same traces; keep conversation content out of them (1.8+)
    if "allow_pii" in inspect.signature(telemetry.set_tracer_provider).parameters:
        telemetry.set_tracer_provider(tracing.provider, allow_pii=False)
    else:
        telemetry.set_tracer_provider(tracing.provider)

    stt = SilentSTT()
    realtime = IdleRealtimeModel(mutable=True, connect_delay=_REALTIME_CONNECT_DELAY)
    with tracing.instrumented(LiveKitHandoffInstrumentor(), "livekit-agents"):
        # each conversation in a task of its own: LiveKit attaches its session's root span as
        # the current context and never detaches it, which would nest the next session in it
        await asyncio.create_task(_pipeline_conversation(stt))
        await asyncio.create_task(_realtime_conversation(realtime))

    return tracing.result(stt_streams=stt.streams, realtime_sessions=len(realtime.sessions))
