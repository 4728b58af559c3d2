"""An app that ends as it is told to, on whatever Python runs it: the delivery tests' user.

``python exit_app.py SETUP END``:

* SETUP ``configure``: ``otel_handoff.configure()`` first; ``env``: ``OTEL_HANDOFF_AUTO_INSTRUMENT=true``,
  set by the caller; ``instrument``: run under ``opentelemetry-instrument``. Nothing here for the two.
* END ``normal``; ``exit`` (``sys.exit(3)``); ``raise`` (an uncaught exception); ``thread`` (a
  non-daemon thread still running); ``job-fork`` / ``job-spawn`` (the conversation in a
  multiprocessing child, which ends with ``os._exit`` after multiprocessing's finalizers); ``serve``
  (a uvicorn server whose ``GET /`` runs the conversation; the caller stops it with SIGTERM).

The conversation is an OpenAI Agents SDK text run, triage handing off to billing (the SDK's own
scripted model), then a span of the app's own, ``after-END``: with a long batch delay and the
conversation-end flush off, only the process's end can deliver them.
"""

import asyncio
import multiprocessing
import socket
import sys
import threading


async def conversation(end: str) -> None:
    from agents import Agent, Runner, set_trace_processors
    from agents.testing import ScriptedModel, assistant_message, function_call
    from opentelemetry import trace

    set_trace_processors([])  # no key, no network: the SDK's own export to OpenAI off
    billing = Agent(name="billing", model=ScriptedModel([[assistant_message("Billing here.")]]))
    triage = Agent(
        name="triage",
        handoffs=[billing],
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="call_1")]]),
    )
    result = await Runner.run(triage, "I was charged twice")
    assert result.last_agent.name == "billing"
    trace.get_tracer("exit-app").start_span(f"after-{end}").end()


def job(end: str) -> None:
    if sys.argv[1] == "configure" and end == "job-spawn":  # a spawned child set nothing up yet
        import otel_handoff

        otel_handoff.configure()
    asyncio.run(conversation(end))


def serve() -> None:
    import uvicorn

    async def app(scope, receive, send):  # a bare ASGI app: each request, one conversation
        if scope["type"] != "http":
            return
        await conversation("serve")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"billing"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # a request made before uvicorn serves waits in the backlog
    print("listening", sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])


def main() -> None:
    setup, end = sys.argv[1], sys.argv[2]
    if setup == "configure":
        import otel_handoff

        otel_handoff.configure()
    if end == "serve":
        serve()
        return
    if end.startswith("job-"):
        process = multiprocessing.get_context(end.removeprefix("job-")).Process(target=job, args=(end,))
        process.start()
        process.join()
        print("job exit code", process.exitcode, flush=True)
        return
    asyncio.run(conversation(end))
    if end == "exit":
        sys.exit(3)
    if end == "raise":
        raise RuntimeError("the app failed after its conversation")
    if end == "thread":
        release = threading.Event()
        threading.Thread(target=release.wait, args=(0.5,), name="app-worker").start()


if __name__ == "__main__":
    main()
