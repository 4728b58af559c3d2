"""An unmodified web app that uses Pipecat Flows (no tracing code), served by uvicorn as Pipecat's
development runner serves a bot: ``uvicorn.run``-style, stopped with SIGTERM.

Used by the auto-instrumentation tests as a user's ``app.py``: ``GET /hello`` answers; FastAPI's
own telemetry makes a span of each request when a tracer provider is configured. Its socket is
bound to port 0 here and the port printed (``listening PORT``). ``APP_PROVIDER=lifespan``: the app
installs its own tracer provider in its lifespan start-up and, at its lifespan shutdown, prints
whether it is still the global one.
"""

import contextlib
import os
import socket

import pipecat.flows  # noqa: F401  (the app's bot uses Flows: that starts the instrumentation)
import uvicorn
from fastapi import FastAPI


@contextlib.asynccontextmanager
async def lifespan(app):
    own = None
    if os.environ.get("APP_PROVIDER") == "lifespan":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        own = TracerProvider()
        trace.set_tracer_provider(own)
    yield
    if own is not None:
        from opentelemetry import trace

        print("own provider kept:", trace.get_tracer_provider() is own, flush=True)


app = FastAPI(lifespan=lifespan)


@app.get("/hello")
async def hello():
    return {"hello": "caller"}


if __name__ == "__main__":
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print("listening", sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="info")).run(sockets=[sock])
