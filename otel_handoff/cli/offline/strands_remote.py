"""Strands Agents over A2A, offline: a billing agent served by another process (``A2AServer``,
``strands-agents[a2a]``), under uvicorn on 127.0.0.1 on a port the OS assigned; its model is
:class:`~.strands.ScriptedModel`. A caller reaches it with ``A2AAgent``: a delegation (the caller
keeps the conversation), not a handoff.

    python -m otel_handoff.cli.offline.strands_remote

serves billing and prints ``port N`` once it listens. No tracing code.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Iterator

from .served import server_process

ANSWER = "Your last invoice was paid."


def serve() -> None:
    """Serve billing over A2A on a port the OS assigns; print it once the socket listens."""
    import uvicorn
    from strands.multiagent.a2a import A2AServer

    from .strands import agent

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn accepts: no start-up race
    port = sock.getsockname()[1]
    billing = agent("billing", [{"text": ANSWER}] * 8, latency=0.05)
    app = A2AServer(billing, host="127.0.0.1", port=port).to_starlette_app()
    print(f"port {port}", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    asyncio.run(server.serve(sockets=[sock]))


@contextlib.contextmanager
def remote_billing(env: dict[str, str] | None = None) -> Iterator[str]:
    """A billing server process for the block; yields its base URL."""
    with server_process([sys.executable, "-m", __name__], env) as port:
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    serve()
