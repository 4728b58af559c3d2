"""A support line split into Pipecat workers: triage answers the call and hands billing questions
to the billing worker, which takes over the conversation.

The session worker holds the transport, the speech-to-text and the shared context; each agent is an
``LLMWorker`` with a model and a voice of its own, bridged to the session over the bus, one active
at a time. Triage's ``transfer_to_billing`` tool hands over with ``activate_worker("billing",
deactivate_self=True)``. Run with Pipecat's development runner, as ``bot.py``:

    python workers_bot.py -t webrtc

(Test harness: the services come from ``scripted.py``, where an app would import its providers'
services; the last lines hand the process to the test's measurements when asked.)
"""

import os
from typing import Any

from pipecat.bus.bridge_processor import BusBridgeProcessor
from pipecat.frames.frames import FunctionCallResultProperties, LLMRunFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.runner.types import RunnerArguments
from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.transport import SmallWebRTCTransport
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies
from pipecat.workers.llm import LLMWorker, LLMWorkerActivationArgs, tool
from pipecat.workers.runner import WorkerRunner
from scripted import EndpointingSTT, ToneTTS, billing_llm, triage_llm


class Triage(LLMWorker):
    """Greets the caller and finds out what they need."""

    @tool(cancel_on_interruption=False)
    async def transfer_to_billing(self, params: Any) -> None:
        """Transfer the caller to billing, for invoices and payments."""
        await params.result_callback(
            {"transferred_to": "billing"}, properties=FunctionCallResultProperties(run_llm=False)
        )
        await self.activate_worker(
            "billing",
            args=LLMWorkerActivationArgs(
                messages=[{"role": "developer", "content": "Tell the caller you can help with their bill."}]
            ),
            deactivate_self=True,
        )


def agent(worker: type[LLMWorker], name: str, llm: Any, *, active: bool = False) -> LLMWorker:
    """An agent worker: its model and its own voice, bridged to the session over the bus."""
    return worker(name, llm=llm, pipeline=Pipeline([llm, ToneTTS(name)]), active=active, bridged=())


async def bot(runner_args: RunnerArguments) -> None:
    connection = runner_args.webrtc_connection
    transport = SmallWebRTCTransport(
        webrtc_connection=connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    runner = WorkerRunner(handle_sigint=runner_args.handle_sigint)
    context = LLMContext([{"role": "system", "content": "You answer a support line."}])
    aggregators = LLMContextAggregatorPair(
        context, user_params=LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies())
    )
    session = PipelineWorker(
        Pipeline(
            [
                transport.input(),
                EndpointingSTT("I have a question about my bill."),
                aggregators.user(),
                BusBridgeProcessor(bus=runner.bus, worker_name="session"),
                transport.output(),
                aggregators.assistant(),
            ]
        ),
        name="session",
        params=PipelineParams(),
        enable_tracing=True,
        conversation_id=connection.pc_id,
    )
    triage = agent(Triage, "triage", triage_llm(), active=True)
    billing = agent(LLMWorker, "billing", billing_llm())

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport: SmallWebRTCTransport, client: object) -> None:
        await session.queue_frame(LLMRunFrame())  # triage greets

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport: SmallWebRTCTransport, client: object) -> None:
        await runner.cancel()

    await runner.add_workers(session, triage, billing)
    await runner.run()


if __name__ == "__main__":
    if os.environ.get("PIPECAT_CALL_MEASUREMENTS"):
        import measure

        measure.install()

    from pipecat.runner.run import main

    main()
