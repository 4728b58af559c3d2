"""Property test: random sequences of real handoffs keep the span model's invariants."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from livekit.agents import AgentSession, llm
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS
from lk_agents import Router

from otel_handoff.cli.offline.livekit import ScriptedLLM, ScriptedLLMStream
from otel_handoff.core import schema as sc
from otel_handoff.livekit import LiveKitHandoffInstrumentor

# operation -> handoffs it causes
OPERATIONS = {"tool_transfer": 1, "update_agent": 1, "agent_task": 2, "close_and_restart": 0}


class CommandLLM(ScriptedLLM):
    """Calls the tool the test names for the next turn (again and again); otherwise talks."""

    def __init__(self) -> None:
        super().__init__()
        self.next_tool: str | None = None

    def chat(
        self,
        *,
        chat_ctx: Any,
        tools: Any = None,
        conn_options: Any = DEFAULT_API_CONNECT_OPTIONS,
        **kwargs: Any,
    ) -> Any:
        reply: Any = self.reply
        if self.next_tool:
            self.called.append(self.next_tool)
            reply = llm.FunctionToolCall(
                name=self.next_tool, arguments="{}", call_id=f"call_{len(self.called)}"
            )
            self.next_tool = None
        return ScriptedLLMStream(
            self, chat_ctx=chat_ctx, tools=list(tools or []), conn_options=conn_options, reply=reply
        )


async def run_operations(operations: list[str]) -> list[int]:
    """Run them on real sessions; returns the number of handoffs expected per session."""
    expected: list[int] = []

    async def new_session() -> tuple[AgentSession, CommandLLM]:
        llm = CommandLLM()
        session = AgentSession(llm=llm)
        await session.start(agent=Router())
        expected.append(0)
        return session, llm

    session, llm = await new_session()
    for operation in operations:
        if operation == "close_and_restart":
            await session.aclose()
            session, llm = await new_session()
            continue
        if operation == "update_agent":
            session.update_agent(Router())
            await session._update_activity_atask
        elif operation == "tool_transfer":
            llm.next_tool = "transfer"
            await session.run(user_input="go on")
            await session._update_activity_atask
        else:  # run() may return before the task hands back: wait for the tool to resume
            router = session.current_agent
            router.task_returned.clear()
            llm.next_tool = "ask_email"
            await session.run(user_input="go on")
            await asyncio.wait_for(router.task_returned.wait(), 10)
        expected[-1] += OPERATIONS[operation]
    await session.aclose()
    return expected


@pytest.fixture(scope="module")
def instrumented_module(provider: Any) -> Any:
    instrumentor = LiveKitHandoffInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield
    instrumentor.uninstrument()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(OPERATIONS)), min_size=1, max_size=6))
def test_random_handoff_sequences_keep_invariants(
    instrumented_module: Any, span_exporter: Any, operations: list[str]
) -> None:
    span_exporter.clear()
    expected = asyncio.run(run_operations(operations))

    handoffs = sorted(
        (s for s in span_exporter.get_finished_spans() if s.name == sc.SPAN_HANDOFF),
        key=lambda s: s.start_time,
    )
    # one span per handoff; sessions ran one after another, so in start order the spans fall
    # into one run per session, and each run's sequence numbers count 1, 2, ... again
    assert len(handoffs) == sum(expected)
    position = 0
    for count in expected:
        run = handoffs[position : position + count]
        assert [s.attributes[sc.SEQUENCE] for s in run] == list(range(1, count + 1))
        position += count
    for span in handoffs:
        attrs = span.attributes
        durations = {k: v for k, v in attrs.items() if k.endswith(".duration")}
        assert all(v >= 0 for v in durations.values()), durations
        phases = [
            attrs.get(sc.DRAIN_DURATION, 0),
            attrs.get(sc.PAUSE_DURATION, 0),
            attrs.get(sc.CLOSE_DURATION, 0),
            attrs.get(sc.START_DURATION, 0),
            attrs.get(sc.RESUME_DURATION, 0),
            attrs.get(sc.PREPARE_DURATION, 0),
            attrs.get(sc.SWITCH_DURATION, 0),
        ]
        assert abs(attrs[sc.DURATION] - sum(phases)) <= 0.001
        assert attrs[sc.OUTCOME] == "completed"
        assert span.end_time >= span.start_time
