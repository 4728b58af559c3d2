"""A Pipecat app split into workers across two processes on a RedisBus, with no tracing code.

``python app.py front SOCKET CHANNEL``: the session (the transport's worker) and triage;
``python app.py billing SOCKET CHANNEL``: billing, in a process of its own. The user says hello,
then asks for billing: triage's ``transfer_to`` tool hands over with
``activate_worker("billing", deactivate_self=True)``, and billing answers from the other process,
its audio crossing the bus back to the session. Traced only by ``OTEL_HANDOFF_AUTO_INSTRUMENT=true``
in the environment. Only the model, the TTS and the output stage are scripted.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from loguru import logger
from pipecat.bus import BusEndMessage
from pipecat.bus.network.redis import RedisBus
from pipecat.workers.runner import WorkerRunner
from redis.asyncio import Redis

from otel_handoff.cli.offline import pipecat_workers as pw
from otel_handoff.cli.offline.pipecat_flows import RUN_TIMEOUT, Progress

logger.remove()
logger.add(sys.stderr, level="WARNING")  # what Pipecat warns of (the drain giving up) stays visible

TRIAGE = [
    "Hello, this is triage.",
    ("Let me transfer you to billing now.", [("transfer_to", {"agent": "billing"})]),
]
BILLING = ["Billing here, how can I help?"]


async def front(bus: RedisBus) -> None:
    progress = Progress()
    runner = WorkerRunner(bus=bus, handle_sigint=False)
    output = pw.PlayingOutput()
    output.progress = progress
    session = pw.session_worker(bus, output)
    triage = pw.Agent("triage", TRIAGE, active=True, progress=progress)
    billing_ready = asyncio.Event()

    @triage.event_handler("on_worker_ready")
    async def _ready(_: Any, data: Any) -> None:
        if data.worker_name == "billing":
            billing_ready.set()

    await runner.add_workers(session, triage)
    await triage.watch_workers("billing")  # known once the runners have swapped registries
    running = asyncio.create_task(runner.run())
    await asyncio.wait_for(billing_ready.wait(), RUN_TIMEOUT)
    await pw.ask_for_billing(session, output, progress)
    print("billing answered", flush=True)
    await bus.send(BusEndMessage(source="app", reason="done"))  # both runners end
    await asyncio.wait_for(running, RUN_TIMEOUT)


async def billing(bus: RedisBus) -> None:
    progress = Progress()
    runner = WorkerRunner(bus=bus, handle_sigint=False)
    agent = pw.Agent("billing", BILLING, progress=progress)

    @agent.event_handler("on_pipeline_started")
    async def _started(*_: Any) -> None:
        print("billing ready", flush=True)

    await runner.add_workers(agent)
    await runner.run()


async def main(role: str, socket: str, channel: str) -> None:
    redis = Redis(unix_socket_path=socket)
    bus = RedisBus(redis=redis, channel=channel)
    try:
        await (front(bus) if role == "front" else billing(bus))
    finally:
        await redis.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
