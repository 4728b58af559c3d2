"""LiveKit Agents 2.0 (pre-releases from 2.0.0b1): what changed under the handoff, traced the same way.

2.0 renamed `AgentSession` to `LiveSession` (the old name a warning alias), moved an agent's history
to its activity (`update_agent(agent, chat_ctx=)`), and took `AgentTask.complete()` away (an
`on_enter` returns `Completed(value)`). The handoff path itself is Python still: the compiled core
(`_core.abi3.so`) serves the worker and storage. Tests of what 1.x has too run on both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import warnings
from typing import Any

import pytest
from livekit.agents import llm
from livekit.agents.voice import agent_session
from lk_agents import UPDATE_AGENT_PHASES, Billing, Support, Triage
from opentelemetry.trace import StatusCode
from support import Spans
from test_livekit_handoffs import check_schema, child_names, running

from otel_handoff.cli import demo
from otel_handoff.cli.offline.livekit import IdleRealtimeModel, ScriptedLLM, SilentSTT, settle
from otel_handoff.core import schema as sc
from otel_handoff.livekit import LiveKitHandoffInstrumentor, _features
from otel_handoff.livekit._features import detect

FEATURES = detect()
IS_2_0 = FEATURES.session_class == "LiveSession"
needs_2_0 = pytest.mark.skipif(not IS_2_0, reason="update_agent(chat_ctx=) is new in livekit-agents 2.0")
needs_text_runs = pytest.mark.skipif(not IS_2_0, reason="agent.run() is new in livekit-agents 2.0")
needs_cancel = pytest.mark.skipif(
    not FEATURES.cancel_handoff_hook, reason="no FunctionToolsExecutedEvent.cancel_agent_handoff here"
)


def history(text: str) -> llm.ChatContext:
    chat_ctx = llm.ChatContext.empty()
    chat_ctx.add_message(role="user", content=[text])
    return chat_ctx


def test_a_tested_release_is_instrumented_without_a_word(
    provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """2.0's `AgentSession` is the module's `__getattr__` alias of `LiveSession`, which warns:
    instrumenting reads the class by the name the module defines, and warns of nothing; a
    pre-release the matrix passes is tested, so no "newer than the releases tested" line either."""
    assert FEATURES.session_class in vars(agent_session)
    caplog.set_level(logging.INFO, logger="otel_handoff")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        instrumentor = LiveKitHandoffInstrumentor()
        instrumentor.instrument(tracer_provider=provider)
        instrumentor.uninstrument()
    assert [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)] == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("otel_handoff")] == []


@pytest.mark.skipif(not FEATURES.reuse, reason="no resource reuse to mirror before livekit-agents 1.5.3")
def test_a_reuse_check_we_cannot_mirror_is_refused(
    provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The reuse reasons re-read the framework's realtime check; a release that reads the new
    agent's history neither as 1.x (`agent.chat_ctx`) nor as 2.0 (`activity._chat_ctx`) does would
    make them wrong: such a release is not instrumented, with one error line."""
    assert FEATURES.realtime_reuse_history == ("activity" if IS_2_0 else "agent")
    monkeypatch.setattr(_features, "_realtime_reuse_history", lambda detach: None)
    caplog.set_level(logging.ERROR, logger="otel_handoff")
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert not LiveKitHandoffInstrumentor._wrapped
        (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert "_detach_reusable_resources" in line and "not traced" in line
    finally:
        instrumentor.uninstrument()
    assert _features.missing(dataclasses.replace(FEATURES, realtime_reuse_history="agent")) == []


def test_a_session_that_hands_off_outside_python_is_refused() -> None:
    """2.0's compiled core has a session of its own; one whose `update_agent` went there, past
    `_update_activity`, would leave every wrapper waiting: the check names what it misses."""
    assert _features.python_handoff_path(vars(agent_session)[FEATURES.session_class]) == []

    class CoreBacked:
        def update_agent(self, agent: Any) -> None:
            self._core.update_agent(agent)

        async def _update_activity_task(self, old_task: Any, agent: Any) -> None:
            await self._core.hand_off(agent)

    assert _features.python_handoff_path(CoreBacked) == [
        "CoreBacked.update_agent calling _update_activity_task",
        "CoreBacked._update_activity_task calling _update_activity",
    ]


@needs_2_0
@pytest.mark.parametrize("given", [True, False], ids=["chat_ctx", "continued"])
async def test_update_agent_with_and_without_chat_ctx(instrumented: Spans, given: bool) -> None:
    """A handoff to a history of the app's (2.0) is one like any other: same schema, same phases;
    on a realtime model that cannot take a new history, the reasons say so as LiveKit decided."""
    model = IdleRealtimeModel(mutable=False)
    async with running(Billing("You are A."), llm=model) as session:
        support = Support("You are A.")
        if given:
            session.update_agent(support, chat_ctx=history("my order number is 12345"))
        else:
            session.update_agent(support)
        await settle(session)
        assert session.current_agent is support
        reused_by_livekit = len(model.sessions) == 1

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert (attrs[sc.TRIGGER], attrs[sc.OUTCOME]) == ("api", "completed")
    assert child_names(instrumented, handoff) == UPDATE_AGENT_PHASES
    assert attrs[sc.REALTIME_SESSION_REUSED] is reused_by_livekit
    blocked = list(attrs[sc.REALTIME_REUSE_BLOCKED_BY])
    assert blocked == ([] if reused_by_livekit else [sc.BLOCKED_CHAT_CTX])
    if given:
        assert not reused_by_livekit  # a different history on a model that cannot take it


@needs_cancel
async def test_a_handoff_the_app_cancelled_is_rejected_visibly(instrumented: Spans) -> None:
    """`ev.cancel_agent_handoff()` in a `function_tools_executed` handler: LiveKit drops the agent
    the tool returned without a word; the request is a `rejected` handoff saying who dropped it."""
    session_llm = ScriptedLLM(tool_calls=["transfer"])
    async with running(Triage(), llm=session_llm) as session:
        session.on("function_tools_executed", lambda ev: ev.cancel_agent_handoff())
        await session.run(user_input="I have a billing question")
        await settle(session)
        assert isinstance(session.current_agent, Triage)

    [handoff] = instrumented.handoffs()
    attrs = check_schema(handoff)
    assert attrs[sc.OUTCOME] == "rejected"
    assert handoff.status.status_code is StatusCode.ERROR
    assert attrs[sc.REJECTION_REASON] == "cancel_agent_handoff"
    assert (attrs[sc.GEN_AI_TOOL_NAME], attrs[sc.GEN_AI_TOOL_CALL_ID]) == ("transfer", "call_1")
    assert (attrs[sc.FROM_AGENT_NAME], attrs[sc.TO_AGENT_NAME]) == (Triage().label, Billing().label)
    assert attrs[sc.DURATION] == 0 and not instrumented.children(handoff)
    [session_span] = instrumented.named("agent_session")
    assert handoff.context.trace_id == session_span.context.trace_id


@needs_cancel
async def test_a_cancel_without_an_agent_is_no_handoff(instrumented: Spans) -> None:
    """A cancel on a batch whose tools returned no agent (nothing to hand off): nothing of ours."""
    async with running(Triage(), llm=ScriptedLLM(tool_calls=["ask_email"])) as session:
        session.on("function_tools_executed", lambda ev: ev.cancel_agent_handoff())
        await session.run(user_input="take my email")
        await settle(session)
    assert [h.attributes[sc.TRIGGER] for h in instrumented.handoffs()] == ["task", "task"]


async def test_the_demos_voice_pipeline_transfers(instrumented: Spans) -> None:
    """The demo's pipeline (an AgentTask collecting an email, then a transfer) on this release:
    2.0 dropped `AgentTask.complete()`, which left the task failing and the transfer never made."""
    await asyncio.wait_for(demo._pipeline_conversation(SilentSTT()), 30)
    kinds = [(h.attributes[sc.TRIGGER], h.attributes[sc.OUTCOME]) for h in instrumented.handoffs()]
    assert kinds == [("task", "completed"), ("task", "completed"), ("tool", "completed")]
    assert not [s for s in instrumented.named(sc.SPAN_ON_ENTER) if s.status.status_code is StatusCode.ERROR]


@needs_text_runs
async def test_a_text_runs_handoff_is_not_traced_and_untouched(
    instrumented: Spans, caplog: pytest.LogCaptureFixture
) -> None:
    """2.0's `agent.run()` (one text turn, no session) hands off on a stack of agents of its own:
    not traced yet (docs/livekit.md), and nothing of ours fails or shows there."""
    caplog.set_level(logging.WARNING, logger="otel_handoff")
    model = ScriptedLLM(tool_calls=["transfer"])
    result = await Triage(llm=model, next_agent=lambda: Billing(llm=model)).run("billing please")
    assert result.output == "ok" and model.called == ["transfer"]
    ours = [s.name for s in instrumented.all() if s.instrumentation_scope.name.startswith("otel_handoff")]
    assert ours == []
    assert [r.getMessage() for r in caplog.records if r.name.startswith("otel_handoff")] == []
