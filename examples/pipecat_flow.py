"""A Pipecat Flows bot, written as Pipecat Flows' documentation writes one, with no tracing code.

Only the edges are stand-ins (a scripted LLM, a silent TTS, an output in place of the transport,
so it runs with no key and no audio device): use yours. Traced and written to a file, with no
change here:

    OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file \\
    OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python pipecat_flow.py
    otel-handoff summary spans.jsonl
"""

# ruff: noqa: E402
# (Pipecat logs as it is imported: its logger is set up first)
import asyncio
import sys

from loguru import logger

logger.remove()
logger.add(sys.stderr, level="ERROR")

from pipecat.flows import FlowManager, FlowResult, NodeConfig
from pipecat.frames.frames import LLMMessagesAppendFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.workers.runner import WorkerRunner

# stand-ins for your LLM, TTS and transport
from otel_handoff.cli.offline.pipecat_flows import ScriptedLLM, SilentTTS, SpeakerOutput


async def transfer_to_billing(flow_manager: FlowManager) -> tuple[FlowResult, NodeConfig]:
    """Transfer the customer to billing."""
    return {"status": "transferred"}, create_billing_node()


def create_greeting_node() -> NodeConfig:
    return NodeConfig(
        name="greeting",
        role_message="You are a customer service agent.",
        task_messages=[{"role": "system", "content": "Route the customer to the right department."}],
        functions=[transfer_to_billing],
        respond_immediately=False,
    )


def create_billing_node() -> NodeConfig:
    return NodeConfig(
        name="billing",
        task_messages=[{"role": "system", "content": "Answer the billing question, then say goodbye."}],
        post_actions=[{"type": "end_conversation"}],
    )


async def main() -> None:
    llm = ScriptedLLM([[("transfer_to_billing", {})], "Your last invoice was paid in full."])
    tts = SilentTTS()
    output = SpeakerOutput()  # in place of transport.output()

    context = LLMContext()
    context_aggregator = LLMContextAggregatorPair(context)
    pipeline = Pipeline([context_aggregator.user(), llm, tts, output, context_aggregator.assistant()])
    worker = PipelineWorker(pipeline, params=PipelineParams())
    flow_manager = FlowManager(worker=worker, llm=llm, context_aggregator=context_aggregator)

    @worker.event_handler("on_pipeline_started")
    async def on_pipeline_started(worker, frame):
        await flow_manager.initialize(create_greeting_node())
        # the customer's words, as your transport and speech-to-text would bring them
        user = {"role": "user", "content": "Why was I charged twice?"}
        await worker.queue_frame(LLMMessagesAppendFrame(messages=[user], run_llm=True))

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
    print(flow_manager.current_node, [message["role"] for message in context.get_messages()])


asyncio.run(main())
