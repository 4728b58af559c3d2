"""Nothing kept, nothing changed: many concurrent LiveKit sessions, dropped, leave nothing of ours.

Forty real ``AgentSession``\\ s, ten to each of four threads with an event loop of its own (as
LiveKit's ``thread`` job executor runs jobs), each replay about twenty handoffs: tools returning
agents, ``update_agent()`` from code, queued handoffs, an ``AgentTask`` round trip, sleeping and
raising ``on_enter``/``on_exit`` hooks, a new activity whose start fails, realtime sessions (reused,
and replaced with a connection reported later), and an end mid-handoff (``aclose()`` with the
handoff in flight, with its ``on_enter`` running, before its ``on_enter`` took a step, or no
``aclose()`` at all). After each round the sessions are dropped and collected.

Checked: once collected, nothing of ours keeps a session, agent or activity alive; our per-session
tables are empty; a second identical round leaves no object of ours behind; every span we started
is ended; and what the app's own loops and loggers report (asyncio's "exception was never
retrieved", LiveKit's error logs, the unawaited-coroutine warnings) is the same as without us.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import re
import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import livekit.agents as livekit
import pytest
from livekit.agents import Agent, AgentSession, llm
from livekit.agents.telemetry import set_tracer_provider
from livekit.agents.voice.agent_activity import AgentActivity
from lk_agents import Asker, Billing, Sales, Support, Triage, failing, gated, slow
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode
from packaging.version import Version
from support import OpenSpans, Spans

from otel_handoff.cli.offline.livekit import IdleRealtimeModel, ScriptedLLM, settle
from otel_handoff.core import schema as sc
from otel_handoff.core.emit import Emitted
from otel_handoff.core.record import HandoffRecord, PhaseRecord
from otel_handoff.livekit import LiveKitHandoffInstrumentor
from otel_handoff.livekit._handoff import LiveKitHandoff
from otel_handoff.livekit._wrappers import LiveKitTelemetry

THREADS = 4  # event loops, one per thread, as LiveKit's thread executor runs its jobs
SESSIONS_PER_THREAD = 10
ROUND_LIMIT = 60  # seconds: a bound on a round, not a performance goal
OURS = (LiveKitHandoff, HandoffRecord, PhaseRecord, Emitted)
TABLES = (
    "sequences",
    "tool_causes",
    "awaiting_speech",
    "reconnect_watch",
    "early_connections",
    "progress_updates",
    "conversation_ids",
)
LOGGERS = ("livekit", "asyncio", "otel_handoff")
ENDINGS = ("in flight", "on_enter running", "on_enter not started", "never closed", "closed")


class Tracked:
    """Weak references to the sessions, agents and activities a round makes (thread-safe)."""

    def __init__(self) -> None:
        self.refs: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()

    def __call__(self, obj: Any) -> Any:
        with self._lock:
            self.refs.append(weakref.ref(obj))
        return obj

    def activity(self, session: AgentSession) -> None:
        if session._activity is not None:
            self(session._activity)

    def alive(self) -> Counter[str]:
        gc.collect()
        return Counter(type(ref()).__name__ for ref in self.refs if ref() is not None)


class AppReports:
    """What the app's own loops, loggers and warnings report during a round."""

    def __init__(self) -> None:
        self.loop_errors: list[str] = []
        self.logs: list[str] = []
        self.warnings: list[str] = []
        self.ours: list[str] = []

    def loop_handler(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's default handler's message, with the exception's type (as its log shows)."""
        error = context.get("exception")
        self.loop_errors.append(f"{context['message']}: {type(error).__name__ if error else None}")

    def summary(self) -> dict[str, Counter[str]]:
        return {
            "loop errors": Counter(self.loop_errors),
            "logs": Counter(self.logs),
            "warnings": Counter(self.warnings),
        }


class _LogCapture(logging.Handler):
    def __init__(self, reports: AppReports) -> None:
        super().__init__(logging.WARNING)
        self.reports = reports

    def emit(self, record: logging.LogRecord) -> None:
        target = self.reports.ours if record.name.startswith("otel_handoff") else self.reports.logs
        target.append(f"{record.name} {record.levelname} {record.msg}")


async def outcome(awaitable: Any) -> str:
    try:
        await awaitable
    except BaseException as exc:
        return type(exc).__name__
    return "ok"


async def until(condition: Callable[[], Any]) -> None:
    """Yield to the loop until `condition` holds (bounded in loop turns, not time)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


TOOLSET_SETUP = hasattr(getattr(llm, "Toolset", None), "setup")  # livekit-agents 1.5+
# before 1.6.10 a handoff's task awaits the new agent's on_enter, and a hook that raises fails the
# handoff and leaves the session unable to hand off again: the script's hooks only sleep there
HOOKS_MAY_RAISE = "wait_on_enter=False" in inspect.getsource(AgentSession._update_activity_task)


def raising(error: BaseException) -> Any:
    return failing(error) if HOOKS_MAY_RAISE else slow(0.001)


def failing_toolset() -> list[Any]:
    """A toolset whose setup raises (the new activity's start fails), where toolsets have one."""
    if not TOOLSET_SETUP:
        return []

    class FailingToolset(llm.Toolset):
        @property
        def tools(self) -> list[Any]:
            return []

        async def setup(self) -> Any:
            raise RuntimeError("toolset setup failed")

    return [FailingToolset(id="failing")]


async def hand_off(session: AgentSession, agent: Agent, tracked: Tracked) -> str:
    session.update_agent(tracked(agent))
    result = await outcome(session._update_activity_atask)
    await settle(session)
    tracked.activity(session)
    return result


async def conversation(index: int, tracked: Tracked) -> list[str]:
    """One session's script: about twenty handoffs of every kind, then its end."""
    realtime = index % 3 == 2
    if realtime:  # a model whose session is replaced at every handoff, connecting later
        model: Any = IdleRealtimeModel(mutable=index % 2 == 0, connect_delay=0.002, update_delay=0.001)
        session = tracked(AgentSession(llm=model))
    else:
        session = tracked(AgentSession(llm=ScriptedLLM(tool_calls=["transfer", "ask_email"])))
    seen: list[str] = []
    await session.start(agent=tracked(Triage(next_agent=lambda: tracked(Billing()))))
    tracked.activity(session)
    if not realtime:
        await session.run(user_input="billing, please")  # a tool's handoff
        await settle(session)
        tracked.activity(session)
        seen.append(await hand_off(session, Asker(), tracked))
        await session.run(user_input="my email, please")  # an AgentTask enters and hands back
        await settle(session)
        tracked.activity(session)
    for _ in range(2):
        seen.append(await hand_off(session, Support(enter=slow(0.001)), tracked))
        seen.append(await hand_off(session, Billing(enter=raising(RuntimeError("on_enter"))), tracked))
        seen.append(await hand_off(session, Sales(exit=raising(ValueError("on_exit"))), tracked))
        seen.append(await hand_off(session, Support(exit=slow(0.001)), tracked))
        # queued: two handoffs asked at once, the second waits for the first
        session.update_agent(tracked(Billing()))
        seen.append(await hand_off(session, Support(), tracked))
    seen.append(await hand_off(session, Billing(tools=failing_toolset()), tracked))
    if index % 2 == 0:
        # a handoff that fails (its agent runs in another session), and one queued behind it that
        # fails with it: the app never retrieves what the second raised (asyncio reports it)
        other = tracked(AgentSession(llm=ScriptedLLM()))
        await other.start(agent=tracked(Billing()))
        other.update_agent(session.current_agent)
        other.update_agent(tracked(Support()))
        await asyncio.wait([other._update_activity_atask])
        await other.aclose()
    ending = ENDINGS[index % len(ENDINGS)]
    if ending == "in flight":
        session.update_agent(tracked(Sales()))
        await session.aclose()
    elif ending == "on_enter running":
        started, release = asyncio.Event(), asyncio.Event()
        session.update_agent(tracked(Sales(enter=gated(started, release))))
        await started.wait()
        tracked.activity(session)
        closing = asyncio.ensure_future(session.aclose())
        await until(lambda: session._closing)  # LiveKit's close waits for on_enter to end
        release.set()
        await closing
    elif ending == "on_enter not started":
        session.update_agent(tracked(Sales()))
        task = session._update_activity_atask
        closing: list[asyncio.Future[Any]] = []
        # the close starts in the same loop turn the handoff's task ends in
        task.add_done_callback(lambda _: closing.append(asyncio.ensure_future(session.aclose())))
        await outcome(task)
        await until(lambda: closing)
        await closing[0]
    elif ending == "never closed":  # the app drops it: the loop's end cancels what is left
        started, release = asyncio.Event(), asyncio.Event()
        session.update_agent(tracked(Sales(enter=gated(started, release))))
        await started.wait()
    else:
        await session.aclose()
    return seen


def run_thread(first: int, tracked: Tracked, reports: AppReports) -> list[list[str]]:
    async def sessions() -> list[list[str]]:
        asyncio.get_running_loop().set_exception_handler(reports.loop_handler)
        return await asyncio.wait_for(
            asyncio.gather(*(conversation(first + n, tracked) for n in range(SESSIONS_PER_THREAD))),
            ROUND_LIMIT,
        )

    return asyncio.run(sessions())


def play_round() -> tuple[Tracked, AppReports, list[list[str]]]:
    """One round on THREADS loops at once; returns once every session is dropped and collected."""
    tracked, reports = Tracked(), AppReports()
    capture = _LogCapture(reports)
    # their records go to the capture alone: a handler that keeps records (pytest's) keeps the
    # frames of their exceptions' tracebacks, and the sessions in them, alive
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(capture)
        logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with ThreadPoolExecutor(THREADS) as pool:
                futures = [
                    pool.submit(run_thread, t * SESSIONS_PER_THREAD, tracked, reports) for t in range(THREADS)
                ]
                seen = [script for future in futures for script in future.result()]
            del futures
            gc.collect()
            # a warning's source (an unawaited coroutine) holds its frame: only the text is kept
            reports.warnings = [re.sub(r" at 0x[0-9a-f]+", "", str(w.message)) for w in caught]
            caught.clear()
    finally:
        for logger in loggers:
            logger.removeHandler(capture)
            logger.propagate = True
    return tracked, reports, seen


def ours_alive() -> Counter[str]:
    gc.collect()
    return Counter(type(obj).__name__ for obj in gc.get_objects() if isinstance(obj, OURS))


def livekits_alive() -> Counter[str]:
    gc.collect()
    kinds = (AgentSession, AgentActivity, Agent)
    return Counter(type(obj).__name__ for obj in gc.get_objects() if isinstance(obj, kinds))


def table_sizes(telemetry: LiveKitTelemetry) -> dict[str, int]:
    return {name: len(getattr(telemetry, name)) for name in TABLES}


def test_dropped_sessions_leave_nothing_of_ours(
    instrument: Callable[..., Any], spans: Spans, open_spans: OpenSpans
) -> None:
    before_livekit, before_ours = livekits_alive(), ours_alive()  # what earlier tests left
    plain_tracked, plain, plain_seen = play_round()
    assert plain_tracked.alive() == Counter(), "without us, everything is freed"
    assert livekits_alive() == before_livekit

    instrumentor = instrument(LiveKitHandoffInstrumentor)
    telemetry: LiveKitTelemetry = instrumentor._telemetry
    first, traced, traced_seen = play_round()
    assert first.alive() == Counter(), "a session, agent or activity kept alive by us"
    assert livekits_alive() == before_livekit
    assert table_sizes(telemetry) == dict.fromkeys(TABLES, 0)
    after_first = ours_alive()

    second, _, _ = play_round()
    assert second.alive() == Counter()
    assert table_sizes(telemetry) == dict.fromkeys(TABLES, 0)
    assert ours_alive() - after_first == Counter(), "a second identical round kept objects of ours"
    assert after_first - before_ours == Counter(), "objects of ours outlived their sessions"

    assert traced_seen == plain_seen, "the app saw the same handoff outcomes"
    assert traced.summary() == plain.summary(), "the app's own error reports changed"
    assert traced.ours == []
    assert not open_spans.ours(), "every span we start is ended"
    handoffs = spans.handoffs()
    assert len(handoffs) >= 2 * THREADS * SESSIONS_PER_THREAD * 15


class _CancelOnEnter(SpanProcessor):
    """Cancels the new agent's on_enter task as LiveKit's ``update_agent`` span ends: after the
    start that scheduled it, before its first step (as a loop's shutdown does); with ``shutdown``,
    the app asked the session to close just before."""

    def __init__(self, shutdown: bool) -> None:
        self.close_first = shutdown
        self.session: AgentSession | None = None

    def on_end(self, span: ReadableSpan) -> None:
        session = self.session
        activity = getattr(session, "_activity", None)
        if span.name == "update_agent" and activity is not None and activity._on_enter_task is not None:
            if self.close_first:
                session.shutdown()
            activity._on_enter_task.cancel()


async def on_enter_cancelled_before_its_first_step(canceller: _CancelOnEnter) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = canceller.session = AgentSession(llm=ScriptedLLM())
        await session.start(agent=Triage())
        session.update_agent(Billing())
        handoff = await outcome(session._update_activity_atask)
        on_enter = await outcome(session._activity._on_enter_task)
        await asyncio.sleep(0)  # one loop turn: the done callbacks of that task run
        entered = session.current_agent.entered.is_set()
        closed = await outcome(session._closing_task or session.aclose())
        canceller.session = session = None
        gc.collect()  # LiveKit's on_enter coroutine, never awaited, warns as it goes
    return {
        "outcomes": (handoff, on_enter, closed),
        "entered": entered,
        "warnings": sorted(re.sub(r" at 0x[0-9a-f]+", "", str(w.message)) for w in caught),
    }


@pytest.mark.parametrize("shutdown", [False, True], ids=["cancelled", "session shut down"])
async def test_a_handoff_whose_on_enter_never_started_still_ends(
    shutdown: bool,
    provider: TracerProvider,
    instrument: Callable[..., Any],
    spans: Spans,
    open_spans: OpenSpans,
) -> None:
    if Version(livekit.__version__) < Version("1.8.2"):
        pytest.skip("LiveKit's own update_agent span (the moment to cancel at) is 1.8.2+")
    canceller = _CancelOnEnter(shutdown)
    own = TracerProvider()
    own.add_span_processor(canceller)
    set_tracer_provider(own)
    try:
        plain = await on_enter_cancelled_before_its_first_step(canceller)
        instrument(LiveKitHandoffInstrumentor)
        traced = await on_enter_cancelled_before_its_first_step(canceller)
    finally:
        set_tracer_provider(provider)
    assert traced == plain
    assert plain["outcomes"] == ("ok", "CancelledError", "ok") and not plain["entered"]

    [handoff] = spans.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    [on_enter] = spans.children(handoff, sc.SPAN_ON_ENTER)
    assert on_enter.status.status_code is StatusCode.UNSET  # cut short, not failed
    assert handoff.attributes.get(sc.ENDED_BY) == (sc.ENDED_BY_SESSION_CLOSE if shutdown else None)
    assert not open_spans.ours()
