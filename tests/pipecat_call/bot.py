"""A support line as a Pipecat Flows bot: triage answers the call and moves billing questions to
the billing node.

Run with Pipecat's development runner, the way its docs start a bot:

    python bot.py -t webrtc

``BOT_VAD=silero`` lets Silero's voice activity detection (shipped in pipecat-ai's wheel) start
and end the caller's turns; otherwise the speech-to-text service's endpointing does.

(Test harness: the services come from ``scripted.py``, where an app would import its providers'
services; the last lines hand the process to the test's measurements when asked.)
"""

import os

from pipecat.flows import FlowManager, FlowsFunctionSchema, NodeConfig
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
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import ExternalUserTurnStrategies, UserTurnStrategies
from pipecat.workers.runner import WorkerRunner
from scripted import EndpointingSTT, ScriptedLLM, ToneTTS


async def to_billing(args: dict, flow_manager: FlowManager) -> tuple[None, NodeConfig]:
    return None, billing()


def triage() -> NodeConfig:
    return NodeConfig(
        name="triage",
        role_message="You answer a support line.",
        task_messages=[{"role": "system", "content": "Greet the caller and find out what they need."}],
        functions=[
            FlowsFunctionSchema(
                name="transfer_to_billing",
                description="Transfer the caller to billing, for invoices and payments.",
                properties={},
                required=[],
                handler=to_billing,
            )
        ],
    )


def billing() -> NodeConfig:
    return NodeConfig(
        name="billing",
        task_messages=[{"role": "system", "content": "Tell the caller you can help with their bill."}],
        functions=[],
    )


SILERO = os.environ.get("BOT_VAD") == "silero"


def turns() -> LLMUserAggregatorParams:
    if SILERO:
        from pipecat.audio.vad.silero import SileroVADAnalyzer

        return LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(),
            user_turn_strategies=UserTurnStrategies(
                start=[VADUserTurnStartStrategy()],
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.3)],
            ),
        )
    return LLMUserAggregatorParams(user_turn_strategies=ExternalUserTurnStrategies())


async def bot(runner_args: RunnerArguments) -> None:
    connection = runner_args.webrtc_connection
    transport = SmallWebRTCTransport(
        webrtc_connection=connection,
        params=TransportParams(audio_in_enabled=True, audio_out_enabled=True),
    )
    llm = ScriptedLLM()
    aggregators = LLMContextAggregatorPair(LLMContext(), user_params=turns())
    pipeline = Pipeline(
        [
            transport.input(),
            EndpointingSTT("I have a question about my bill.", proposes_turns=not SILERO),
            aggregators.user(),
            llm,
            ToneTTS(),
            transport.output(),
            aggregators.assistant(),
        ]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(),
        enable_tracing=True,
        conversation_id=connection.pc_id,
    )
    flow_manager = FlowManager(worker=worker, llm=llm, context_aggregator=aggregators)

    @transport.event_handler("on_client_connected")
    async def on_client_connected(transport: SmallWebRTCTransport, client: object) -> None:
        await flow_manager.initialize(triage())

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(transport: SmallWebRTCTransport, client: object) -> None:
        await worker.cancel()

    await WorkerRunner(handle_sigint=runner_args.handle_sigint).run(worker)


if __name__ == "__main__":
    if os.environ.get("PIPECAT_CALL_MEASUREMENTS"):
        import measure

        measure.install()

    from pipecat.runner.run import main

    main()
