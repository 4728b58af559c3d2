"""Faults on the real framework: the host app's outcome is the same with and without us.

Each scenario runs twice, plain and instrumented, and what the app can observe (history,
events, raised exceptions, the current agent) must be identical; on the instrumented run every
span we started is ended and lives in the session's trace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from livekit.agents import AgentSession, llm
from lk_agents import Billing, HandsOffAgain, Support, Triage, failing, gated
from opentelemetry.trace import StatusCode
from support import OpenSpans, Spans

from otel_handoff.cli.offline.livekit import ScriptedLLM
from otel_handoff.core import schema as sc

Scenario = Callable[[AgentSession, list[str]], Awaitable[Any]]


async def wait_until(condition: Callable[[], Any], what: str) -> None:
    """Yield to the event loop until `condition` holds (bounded: a few thousand loop turns)."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def outcome(awaitable: Awaitable[Any]) -> str:
    """What awaiting gave the app: 'ok' or the exception's type and message."""
    try:
        await awaitable
    except BaseException as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def exit_raises(session: AgentSession, notes: list[str]) -> Any:
    session.update_agent(Billing())
    return await outcome(session._update_activity_atask)


async def enter_raises(session: AgentSession, notes: list[str]) -> Any:
    session.update_agent(Billing(enter=failing(RuntimeError("on_enter failed"))))
    result = await outcome(session._update_activity_atask)
    return result, await outcome(session._activity._on_enter_task)


async def start_raises(session: AgentSession, notes: list[str]) -> Any:
    if not hasattr(getattr(llm, "Toolset", None), "setup"):
        pytest.skip("toolsets have no setup() before livekit-agents 1.5")

    class FailingToolset(llm.Toolset):
        @property
        def tools(self) -> list[Any]:
            return []

        async def setup(self) -> Any:
            raise RuntimeError("toolset setup failed")

    session.update_agent(Billing(tools=[FailingToolset(id="failing")]))
    return await outcome(session._update_activity_atask)


async def cancelled_while_draining(session: AgentSession, notes: list[str]) -> Any:
    session.update_agent(Billing())
    task = session._update_activity_atask
    await STARTED_EXIT.wait()
    task.cancel()
    result = await outcome(task)
    RELEASE_EXIT.set()  # an on_exit that was not cancelled with the handoff (1.2) may now end
    return result


async def closed_while_waiting_on_lock(session: AgentSession, notes: list[str]) -> Any:
    lock = session._activity_lock
    await lock.acquire()
    session.update_agent(Billing())
    await wait_until(lambda: lock._waiters, "the handoff waits on the session lock")
    closing = asyncio.create_task(session.aclose())
    await wait_until(lambda: session._closing, "the session is closing")
    lock.release()
    return await outcome(closing), await outcome(session._update_activity_atask)


async def to_the_active_agent(session: AgentSession, notes: list[str]) -> Any:
    session.update_agent(session.current_agent)
    return await outcome(session._update_activity_atask)


async def task_hands_off_again(session: AgentSession, notes: list[str]) -> Any:
    task = HandsOffAgain()
    session.update_agent(task)
    first = await outcome(session._update_activity_atask)
    await wait_until(lambda: type(session.current_agent).__name__ == "Sales", "the task's own handoff")
    return first, await outcome(session._update_activity_atask)


STARTED_EXIT, RELEASE_EXIT = asyncio.Event(), asyncio.Event()
SCENARIOS: dict[str, tuple[Scenario, Callable[[], Any]]] = {
    "on_exit raises": (exit_raises, lambda: Triage(exit=failing(RuntimeError("on_exit failed")))),
    "on_enter raises": (enter_raises, Triage),
    "new activity start raises": (start_raises, Triage),
    "cancelled while draining": (
        cancelled_while_draining,
        lambda: Triage(exit=gated(STARTED_EXIT, RELEASE_EXIT)),
    ),
    "closed while waiting on the lock": (closed_while_waiting_on_lock, Triage),
    "to the agent already active": (to_the_active_agent, Triage),
    "AgentTask on_enter hands off again": (task_hands_off_again, Support),
}


async def cancelled_before_its_first_step(session: AgentSession, notes: list[str]) -> Any:
    session.update_agent(Billing())
    task = session._update_activity_atask
    task.cancel()  # as a loop's shutdown does: the handoff task never runs a step
    return await outcome(task)


# scenarios whose handoff never ran: nothing of it is sent
NEVER_RAN: dict[str, tuple[Scenario, Callable[[], Any]]] = {
    "cancelled before its first step": (cancelled_before_its_first_step, Triage),
}


async def observe(name: str) -> dict[str, Any]:
    scenario, first_agent = {**SCENARIOS, **NEVER_RAN}[name]
    STARTED_EXIT.clear()
    RELEASE_EXIT.clear()
    notes: list[str] = []
    session = AgentSession(llm=ScriptedLLM())
    for event in ("agent_state_changed", "conversation_item_added", "error", "close"):
        session.on(event, lambda ev, event=event: notes.append(event))
    await session.start(agent=first_agent())
    result = await asyncio.wait_for(scenario(session, notes), 10)
    agent = type(session.current_agent).__name__ if session._activity else None
    history = [(item.type, getattr(item, "role", None)) for item in session.history.items]
    # e.g. a cancelled handoff leaves a cancelled on_exit; bounded, so a hang fails instead
    closed = await outcome(asyncio.wait_for(session.aclose(), 10))
    return {"result": result, "agent": agent, "history": history, "events": notes, "closed": closed}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_fault_outcome_unchanged(
    name: str, plain_and_traced: Any, spans: Spans, open_spans: OpenSpans
) -> None:
    plain, traced = await plain_and_traced(lambda: observe(name))
    assert traced == plain

    assert not open_spans.ours(), "every span we start is ended"
    handoffs = spans.handoffs()
    assert handoffs, "the handoff was traced"
    # the instrumented run's session span, ended or not (a failed close can leave it open)
    sessions = [
        *spans.named("agent_session"),
        *(s for s in open_spans.open.values() if s.name == "agent_session"),
    ]
    session_span = max(sessions, key=lambda s: s.start_time)
    ours = [s for s in spans.all() if s.name.startswith(sc.SPAN_HANDOFF)]
    assert {s.context.trace_id for s in ours} == {session_span.context.trace_id}
    for handoff in handoffs:
        errored = handoff.status.status_code is StatusCode.ERROR
        if handoff.attributes[sc.OUTCOME] in ("error", "rejected"):
            assert errored
        elif handoff.attributes[sc.OUTCOME] == "completed":
            assert not errored


@pytest.mark.parametrize("name", list(NEVER_RAN))
async def test_a_handoff_that_never_ran_sends_nothing(
    name: str, plain_and_traced: Any, spans: Spans, open_spans: OpenSpans
) -> None:
    """The app sees what it sees without us; no span of the handoff, none left open, and nothing
    of ours waits on its task (no done callback: its own wrapper sees every task that runs)."""
    plain, traced = await plain_and_traced(lambda: observe(name))
    assert traced == plain
    assert plain["result"] == "CancelledError: "
    assert spans.handoffs() == []
    assert not open_spans.ours()
