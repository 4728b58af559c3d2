"""Strands Agents offline: real agents, event loops, tools, hooks and ``Swarm``; only the model is
scripted (:class:`ScriptedModel`: each call takes the next reply after a set latency, streamed as
a Bedrock-style model streams it)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from strands import Agent
from strands.hooks import HookProvider, HookRegistry
from strands.models.model import Model
from strands.multiagent import Swarm

try:  # the app's way to end the turn at the handoff tool (strands-agents 1.51 and later)
    from strands.hooks import AfterToolsEvent
except ImportError:  # pragma: no cover - older releases: the demo's second run is left out
    AfterToolsEvent = None  # type: ignore[assignment,misc]

TASK = "Why was I charged twice?"


class ScriptedModel(Model):
    """A Strands ``Model`` whose replies are scripted: ``{"text": ...}``, ``{"handoff": agent}`` (the
    swarm's ``handoff_to_agent`` tool), ``{"tools": [name, ...]}`` (the agent's own tools, after
    any handoff call) or ``{"raise": exception}``; each call takes the next, after ``"latency"``
    seconds when the reply sets it."""

    def __init__(self, name: str, script: list[dict[str, Any]], latency: float = 0.05) -> None:
        self.name = name
        self.script = list(script)
        self.latency = latency
        self.calls = 0
        self.config: dict[str, Any] = {"model_id": f"scripted-{name}"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    async def structured_output(
        self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any
    ) -> Any:
        raise NotImplementedError("the offline model answers no structured output")
        yield  # an async generator, as Model's

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.calls += 1
        reply = self.script.pop(0) if self.script else {"text": "Done."}
        await asyncio.sleep(reply.get("latency", self.latency))
        if "raise" in reply:
            raise reply["raise"]
        yield {"messageStart": {"role": "assistant"}}
        for n, call in enumerate(reply.get("handoffs") or ([reply["handoff"]] if "handoff" in reply else [])):
            call_id = f"tooluse-{self.name}-{self.calls}-{n}"
            arguments = {"agent_name": call, "message": "over to you", "context": {"ticket": 7}}
            yield {
                "contentBlockStart": {
                    "start": {"toolUse": {"name": "handoff_to_agent", "toolUseId": call_id}}
                }
            }
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(arguments)}}}}
            yield {"contentBlockStop": {}}
        for n, name in enumerate(reply.get("tools") or ()):
            call_id = f"tooluse-{self.name}-{self.calls}-{name}-{n}"
            yield {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": call_id}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": "{}"}}}}
            yield {"contentBlockStop": {}}
        if "text" in reply:
            yield {"contentBlockStart": {"start": {}}}
            for i, word in enumerate(reply["text"].split(" ")):
                yield {"contentBlockDelta": {"delta": {"text": word if i == 0 else " " + word}}}
            yield {"contentBlockStop": {}}
        stop = "tool_use" if {"handoff", "handoffs", "tools"} & set(reply) else "end_turn"
        yield {"messageStop": {"stopReason": stop}}
        yield {
            "metadata": {
                "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                "metrics": {"latencyMs": 0},
            }
        }


class EndTurnAtHandoff(HookProvider):
    """The app's hook that ends the old agent's turn once its handoff tool succeeded: no drain."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(AfterToolsEvent, self.end_turn)

    @staticmethod
    def end_turn(event: Any) -> None:
        results = [block["toolResult"] for block in event.message["content"] if "toolResult" in block]
        if any(result.get("status") == "success" for result in results):
            event.end_turn = True


def agent(
    name: str, script: list[dict[str, Any]], latency: float = 0.05, hooks: Any = None, **options: Any
) -> Agent:
    return Agent(
        name=name,
        description=f"The {name} agent",
        system_prompt=f"You are {name}.",
        model=ScriptedModel(name, script, latency),
        hooks=hooks or [],
        callback_handler=None,
        **options,
    )


def swarm(
    triage: list[dict[str, Any]] | None = None,
    billing: list[dict[str, Any]] | None = None,
    *,
    latency: float = 0.05,
    billing_latency: float = 0.12,
    end_turn: bool = False,
    session_id: str | None = None,
    hooks: Any = None,
    triage_options: dict[str, Any] | None = None,
    **options: Any,
) -> Swarm:
    """triage and billing in a real ``Swarm``; by default triage hands off to billing and, as Strands
    does by default, makes one more model call (its closing reply) before the switch.
    ``triage_options``: more of triage's ``Agent`` arguments (its tools, hooks, tool executor)."""
    triage_script = (
        triage if triage is not None else [{"handoff": "billing"}, {"text": "Billing will help you."}]
    )
    billing_script = billing if billing is not None else [{"text": "Your last invoice was paid in full."}]
    if end_turn and AfterToolsEvent is None:
        raise RuntimeError("this strands-agents has no AfterToolsEvent: the turn cannot be ended at the tool")
    triage_options = dict(triage_options or {})
    triage_hooks = [*([EndTurnAtHandoff()] if end_turn else []), *triage_options.pop("hooks", [])]
    nodes = [
        agent("triage", triage_script, latency, triage_hooks, **triage_options),
        agent("billing", billing_script, billing_latency),
    ]
    if session_id is not None:
        from strands.session.file_session_manager import FileSessionManager

        options["session_manager"] = FileSessionManager(session_id=session_id, storage_dir=tempfile.mkdtemp())
    return Swarm(nodes, entry_point=nodes[0], hooks=hooks, **options)


async def stream(swarm: Swarm, task: str = TASK) -> list[dict[str, Any]]:
    """The swarm streamed as an app streams it: every event it yields."""
    return [event async for event in swarm.stream_async(task)]
