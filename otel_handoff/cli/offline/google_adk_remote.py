"""Google ADK over A2A, offline: triage here transfers to billing served by another process.

The server process is what ``to_a2a()`` makes (a Starlette app: the agent card, the JSON-RPC
route, ADK's ``A2aAgentExecutor``) under uvicorn on 127.0.0.1, on a port the OS assigned;
billing's model is :class:`~.google_adk.ScriptedLlm`. The client is ADK's ``RemoteA2aAgent``
as triage's sub-agent: a real A2A call (card GET, ``SendStreamingMessage`` over SSE) on
loopback. Only the two models are scripted.

    python -m otel_handoff.cli.offline.google_adk_remote [--latency S] [--cut | --refuse]
    python -m otel_handoff.cli.offline.google_adk_remote --call CARD_URL [--turns N]

The first serves billing and prints ``port N`` once it listens (``--cut``: each A2A stream is
cut after its first event; ``--refuse``: each A2A request is answered 403); the second is the
client app, a turn per transfer, each printing who answered. Neither has tracing code.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from .google_adk import APP, USER, RunResult, ScriptedLlm, message, quiet_adk_notices, reply, transfer_call
from .served import server_process

CARD_PATH = "/.well-known/agent-card.json"
# what the app asks, turn after turn, and what billing answers to each (anything else: the last)
QUESTIONS = ("Was my last invoice paid?", "And can I get a refund?")
ANSWERS = ("Your last invoice was paid.", "Refund issued.", "Anything else?")


class _AnsweringLlm(ScriptedLlm):
    """Billing's model: the answer to the question it was sent, the same every time it is asked."""

    async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
        import asyncio

        asked = " ".join(p.text or "" for c in llm_request.contents or () for p in c.parts or ())
        answer = next((a for q, a in zip(QUESTIONS, ANSWERS, strict=False) if q in asked), ANSWERS[-1])
        await asyncio.sleep(self.latency)
        yield reply(answer)


def billing(latency: float = 0.15) -> Any:
    from google.adk.agents import LlmAgent

    return LlmAgent(
        name="billing",
        description="Answers billing questions.",
        instruction="You are billing.",
        model=_AnsweringLlm(model="scripted-billing", script=[], latency=latency),
    )


def _refusing(app: Any) -> Any:
    """The app, behind a gate that answers every A2A request (a POST) 403: a server refusing."""

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            await send({"type": "http.response.start", "status": 403, "headers": []})
            await send({"type": "http.response.body", "body": b"forbidden"})
            return
        await app(scope, receive, send)

    return gate


class StreamCut(Exception):
    """Raised into the server app to drop a connection mid-stream (uvicorn closes it)."""


def _cutting(app: Any) -> Any:
    """The app, whose A2A answers are cut: a stream after its first event, an answer sent whole
    (ADK 1.x, a2a-sdk 0.3) halfway; the connection drops in the middle of the answer, as when a
    server goes away (the process stays up for the next request)."""

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        events = 0

        async def cut_send(message: Any) -> None:
            nonlocal events
            body = message.get("body") if message["type"] == "http.response.body" else None
            if body:
                events += 1
                if events > 1:
                    raise StreamCut
                if not message.get("more_body"):  # the whole answer at once: half of it
                    await send(
                        {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
                    )
                    raise StreamCut
            await send(message)

        with contextlib.suppress(StreamCut):
            await app(scope, receive, cut_send)

    return gate


def serve(latency: float = 0.15, cut: bool = False, refuse: bool = False) -> None:
    """Serve billing over A2A on a port the OS assigns; print it once the socket listens."""
    warnings.filterwarnings("ignore")  # ADK's [EXPERIMENTAL] notices about its A2A parts
    import asyncio

    import uvicorn
    from google.adk.a2a.utils.agent_to_a2a import to_a2a

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts: no start-up race
    port = sock.getsockname()[1]
    app = to_a2a(billing(latency), host="127.0.0.1", port=port)
    print(f"port {port}", flush=True)
    served = _refusing(app) if refuse else _cutting(app) if cut else app
    server = uvicorn.Server(uvicorn.Config(served, log_level="warning", lifespan="on"))
    asyncio.run(server.serve(sockets=[sock]))


@contextlib.contextmanager
def remote_billing(
    *, latency: float = 0.15, cut: bool = False, refuse: bool = False, env: dict[str, str] | None = None
) -> Iterator[str]:
    """A billing server process for the block; yields its agent card's URL."""
    command = [sys.executable, "-m", __name__, "--latency", str(latency)]
    command += ["--cut"] * cut + ["--refuse"] * refuse
    with server_process(command, env) as port:
        yield f"http://127.0.0.1:{port}{CARD_PATH}"


@contextlib.contextmanager
def nothing_listening() -> Iterator[str]:
    """An agent card URL whose port is bound but not listening: a connection there is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{CARD_PATH}"


def remote_billing_agent(card_url: str, **options: Any) -> Any:
    """Billing as the caller sees it: ADK's ``RemoteA2aAgent`` for the served one."""
    warnings.filterwarnings("ignore", message=r".*EXPERIMENTAL.*")
    from google.adk.agents.remote_a2a_agent import RemoteA2aAgent

    return RemoteA2aAgent(
        name="billing", description="Answers billing questions.", agent_card=card_url, **options
    )


def remote_agents(card_url: str, *, turns: int = 1, triage_latency: float = 0.05, **options: Any) -> Any:
    """triage (transfers to billing every turn) with billing, a ``RemoteA2aAgent``, as its sub-agent
    (``options``: the ``RemoteA2aAgent``'s, an ``httpx_client`` say)."""
    from google.adk.agents import LlmAgent

    remote = remote_billing_agent(card_url, **options)
    script = [transfer_call("billing", call_id=f"call-transfer-{n}") for n in range(1, turns + 1)]
    return LlmAgent(
        name="triage",
        description="Routes the customer.",
        instruction="You are triage.",
        model=ScriptedLlm(model="scripted-triage", script=script, latency=triage_latency),
        sub_agents=[remote],
    )


async def converse(card_url: str, turns: int = 1, session_id: str | None = None) -> list[RunResult]:
    """The client app: ``turns`` user turns in one session, each transferred to billing."""
    from google.adk.runners import InMemoryRunner

    results = []
    with quiet_adk_notices():
        runner = InMemoryRunner(agent=remote_agents(card_url, turns=turns), app_name=APP)
        session = await runner.session_service.create_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        for turn in range(turns):
            result = RunResult(session.id)
            try:
                async for event in runner.run_async(
                    user_id=USER, session_id=session.id, new_message=message(QUESTIONS[turn % len(QUESTIONS)])
                ):
                    result.events.append(event)
            except Exception as exc:
                result.error = exc
            results.append(result)
        await runner.close()
    return results


def answered_by(result: RunResult) -> str:
    """Who answered a turn: the author of its last text that is not a thought."""
    authors = [
        event.author
        for event in result.events
        if event.content and any(part.text and not part.thought for part in event.content.parts or ())
    ]
    return authors[-1] if authors else "nobody"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.15, help="billing's model latency, seconds")
    parser.add_argument("--cut", action="store_true", help="cut each A2A stream after its first event")
    parser.add_argument("--refuse", action="store_true", help="answer every A2A request 403")
    parser.add_argument("--call", metavar="CARD_URL", help="be the client app, calling this server")
    parser.add_argument("--turns", type=int, default=1, help="the client's user turns")
    options = parser.parse_args()
    if options.call:
        import asyncio

        for result in asyncio.run(converse(options.call, options.turns)):
            print(f"answered by: {answered_by(result)}", flush=True)
    else:
        serve(options.latency, options.cut, options.refuse)


if __name__ == "__main__":
    main()
