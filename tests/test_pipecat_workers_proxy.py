"""A worker handoff carried between two buses by Pipecat's websocket proxy
(``pipecat.workers.proxy.websocket``), as its remote-proxy example deploys one: the session and triage
on one runner with a ``WebSocketProxyClient``, billing on another behind a FastAPI endpoint's
``WebSocketProxyServer``, a real websocket between them (uvicorn on a port the OS assigned). One
process, two buses: only what the proxy's serializer writes crosses. Only the model, the TTS and
the output stage are scripted.
"""

from __future__ import annotations

import asyncio
import socket
import time
from importlib.metadata import version
from typing import Any

import pytest

pytest.importorskip("pipecat.workers.proxy.websocket", reason="needs pipecat-ai with its websocket proxy")
pytest.importorskip("fastapi", reason="the proxy's server side is a FastAPI endpoint")
pytest.importorskip("uvicorn", reason="serves the endpoint")

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from packaging.version import Version
from pipecat.bus import BusFrameMessage
from pipecat.frames.frames import BotStoppedSpeakingFrame, EndFrame
from pipecat.workers.proxy.websocket import WebSocketProxyClient, WebSocketProxyServer
from pipecat.workers.runner import WorkerRunner
from support import Spans

from otel_handoff.cli.offline import pipecat_workers as pw
from otel_handoff.cli.offline.pipecat_flows import RUN_TIMEOUT, Progress
from otel_handoff.core import schema as sc
from otel_handoff.pipecat import PipecatHandoffInstrumentor

logger.remove()  # Pipecat logs every frame at DEBUG through loguru

TRIAGE = [
    "Hello, this is triage.",
    ("Let me transfer you to billing now.", [("transfer_to", {"agent": "billing"})]),
]
BILLING = ["Billing here, how can I help?"]
# the session's assistant aggregator holds the new model call while the old audio plays (1.13 and later)
HOLDS_CONTEXT = Version(version("pipecat-ai")) >= Version("1.13.0")


def _billing_server(progress: Progress) -> tuple[FastAPI, list[pw.Agent]]:
    """The remote side: each connection a runner of its own with billing and the proxy's server end."""
    app = FastAPI()
    served: list[pw.Agent] = []

    @app.websocket("/ws")
    async def endpoint(websocket: WebSocket) -> None:
        await websocket.accept()
        proxy = WebSocketProxyServer(
            "gateway",
            websocket=websocket,
            worker_name="billing",
            remote_worker_name="session",
            forward_messages=(BusFrameMessage,),  # billing's audio back to the session
        )
        billing = pw.Agent("billing", BILLING, progress=progress)
        served.append(billing)
        runner = WorkerRunner(handle_sigint=False)

        @proxy.event_handler("on_client_disconnected")
        async def _gone(*_: Any) -> None:
            await runner.cancel()

        await runner.add_workers(proxy, billing)
        await runner.run()

    return app, served


async def _converse(progress: Progress, port: int, stops: list[int]) -> pw.PlayingOutput:
    """The front: the session, triage and the proxy's client end; the user asks for billing. When
    the bot stops speaking, into ``stops`` (the app's own handler on the session's edge)."""
    runner = WorkerRunner(handle_sigint=False)
    output = pw.PlayingOutput()
    output.progress = progress
    session = pw.session_worker(runner.bus, output)
    triage = pw.Agent("triage", TRIAGE, active=True, progress=progress)
    proxy = WebSocketProxyClient(
        "proxy",
        url=f"ws://127.0.0.1:{port}/ws",
        remote_worker_name="billing",
        local_worker_name="session",
        forward_messages=(BusFrameMessage,),  # the session's frames to billing
        active=True,
    )
    billing_ready = asyncio.Event()

    @session.event_handler("on_frame_reached_upstream")
    async def _stopped(_: Any, frame: Any) -> None:
        stops.append(time.time_ns())

    session.set_reached_upstream_filter((BotStoppedSpeakingFrame,))

    @triage.event_handler("on_worker_ready")
    async def _ready(_: Any, data: Any) -> None:
        if data.worker_name == "billing":
            billing_ready.set()

    await runner.add_workers(proxy, session, triage)
    await triage.watch_workers("billing")  # known once the server's registry crossed
    running = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(billing_ready.wait(), RUN_TIMEOUT)
        for text in ("hi", "billing please"):
            spoken = output.seen.count("TTSStoppedFrame")
            await pw.user_says(session, text)
            await progress.until(lambda s=spoken: output.seen.count("TTSStoppedFrame") > s, "nobody answered")
            await progress.until(lambda: not output.speaking, "the bot never stopped speaking")
        # billing answers from the other bus, its audio back through the proxy
        await progress.until(lambda: output.seen.count("TTSStoppedFrame") >= 3, "billing never answered")
        await progress.until(lambda: not output.speaking, "the bot never stopped speaking")
    finally:
        await session.queue_frame(EndFrame())
        await runner.end()  # the proxy's client closes the websocket: the server's runner ends too
        await asyncio.wait_for(running, RUN_TIMEOUT)
    return output


async def test_a_handoff_through_the_websocket_proxy_is_one_trace(instrument: Any, spans: Spans) -> None:
    instrument(PipecatHandoffInstrumentor)
    progress = Progress()
    stops: list[int] = []
    app, served = _billing_server(progress)
    listening = socket.create_server(("127.0.0.1", 0))  # bound before anyone connects: no port guessed
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        output = await _converse(progress, listening.getsockname()[1], stops)
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, RUN_TIMEOUT)
    (billing,) = served
    assert billing.model.answered == 1 and "TTSAudioRawFrame" in output.seen  # what Pipecat did

    (handoff,) = spans.handoffs()  # exactly one, though both buses saw it
    assert (handoff.attributes[sc.FROM_AGENT_NAME], handoff.attributes[sc.TO_AGENT_NAME]) == (
        "triage",
        "billing",
    )
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    # under the front bus's conversation, as carried in the activation's envelope: one trace
    (root,) = [s for s in spans.all() if s.name == sc.SPAN_CHAT]
    assert handoff.parent is not None and handoff.parent.span_id == root.context.span_id
    assert {s.context.trace_id for s in spans.all()} == {root.context.trace_id}
    # the billing side has no session of its own, whose aggregator holds billing's first model call
    # while triage's audio plays: no wait for the old audio of its own there, it is in first_output
    children = {child.name.removeprefix("agent_handoff."): child for child in spans.children(handoff)}
    # (before pipecat-ai 1.8 the drain is LLMWorker finishing the call inside the tool)
    assert list(children) == ["handler", "drain", "bus_crossing", "setup", "first_output"]
    for name, child in children.items():  # with -s: the numbers
        print(f"{name:>14} {(child.end_time - child.start_time) / 1e6:10.1f} ms")
    if HOLDS_CONTEXT:
        first_output = children["first_output"]
        (old_audio_stopped,) = [t for t in stops if handoff.start_time < t < handoff.end_time]
        assert first_output.start_time < old_audio_stopped < first_output.end_time
