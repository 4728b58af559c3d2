"""Microsoft Agent Framework over A2A, offline (``agent-framework-a2a``, a2a-sdk 1.x): a billing
agent served by another process (``A2AExecutor`` under a2a-sdk's Starlette routes, uvicorn on
127.0.0.1 on a port the OS assigned), and a ``HandoffBuilder`` workflow whose triage agent reaches
it with ``A2AAgent``, as a tool (``as_tool``): a delegation (triage keeps the conversation), not a
handoff; triage then hands off to account, a local agent: a handoff. Both models are
:class:`~.agent_framework.ScriptedClient`.

    python -m otel_handoff.cli.offline.agent_framework_remote            # serve billing
    python -m otel_handoff.cli.offline.agent_framework_remote URL        # triage asks it

The server prints ``port N`` once it listens; the caller prints the handoffs the workflow sent
and what billing answered, as JSON. No tracing code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import Iterator
from typing import Any

from .served import server_process

QUESTION = "Was my last invoice paid?"
ANSWER = "Your last invoice was paid."
REPLY = "Billing says your last invoice was paid."


def serve() -> None:
    """Serve billing over A2A on a port the OS assigns; print it once the socket listens."""
    import uvicorn
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from agent_framework_a2a import A2AExecutor
    from starlette.applications import Starlette

    from .agent_framework import agent

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts: no start-up race
    port = sock.getsockname()[1]
    card = AgentCard(
        name="billing",
        description="Answers billing questions.",
        version="1.0.0",
        default_input_modes=["text"],
        default_output_modes=["text"],
        capabilities=AgentCapabilities(streaming=True),
        supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC")],
        skills=[
            AgentSkill(id="billing", name="billing", description="Invoices and charges.", tags=["billing"])
        ],
    )
    billing = agent("billing", [{"text": ANSWER}] * 8)
    handler = DefaultRequestHandler(
        agent_executor=A2AExecutor(billing), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    print(f"port {port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    asyncio.run(server.serve(sockets=[sock]))


async def ask(url: str) -> list[Any]:
    """A ``HandoffBuilder`` workflow's run: triage asks billing (an ``A2AAgent`` at ``url``, its
    ``billing`` tool) and hands the conversation to account, who answers; its events."""
    from agent_framework_a2a import A2AAgent
    from agent_framework_orchestrations import HandoffBuilder

    from .agent_framework import agent, stream

    async with A2AAgent(name="billing", description="Answers billing questions.", url=url) as remote:
        triage = agent(
            "triage",
            [
                {"tool": "billing", "id": "call-billing-1", "args": {"task": QUESTION}},
                {"tool": "handoff_to_account", "id": "call-handoff-1"},
            ],
            tools=[remote.as_tool()],
        )
        account = agent("account", [{"text": REPLY}])
        workflow = (
            HandoffBuilder(name="support", participants=[triage, account]).with_start_agent(triage).build()
        )
        return await stream(workflow, QUESTION)


def billing_said(events: list[Any]) -> list[str]:
    """What the ``billing`` tool (the remote agent) returned to triage, in the workflow's events."""
    return [
        str(content.result)
        for event in events
        if event.type == "output"
        for content in getattr(event.data, "contents", None) or ()
        if content.type == "function_result" and content.call_id == "call-billing-1"
    ]


@contextlib.contextmanager
def remote_billing(python: str = sys.executable, env: dict[str, str] | None = None) -> Iterator[str]:
    """A billing server process of ``python`` for the block; yields its base URL."""
    with server_process([python, "-m", __name__], env) as port:
        yield f"http://127.0.0.1:{port}/"


if __name__ == "__main__":
    if len(sys.argv) > 1:
        from .agent_framework import handoffs_sent

        events = asyncio.run(ask(sys.argv[1]))
        print(json.dumps({"handoffs": handoffs_sent(events), "billing": billing_said(events)}), flush=True)
    else:
        serve()
