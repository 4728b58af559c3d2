"""Handoffs between Pipecat's multi-agent workers, traced on a real bus with real workers.

Only the model, the TTS and the output stage are scripted (``otel_handoff.cli.offline.pipecat_workers``).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pipecat.workers", reason="needs pipecat-ai >= 1.3.0 (pipecat.workers)")

import itertools
from importlib.metadata import version

from loguru import logger
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from packaging.version import Version
from pipecat.pipeline.worker import PipelineWorker
from support import Spans

from otel_handoff.cli.offline import pipecat_workers as pw
from otel_handoff.core import schema as sc
from otel_handoff.pipecat import PipecatHandoffInstrumentor

logger.remove()  # Pipecat logs every frame at DEBUG through loguru

# the session's assistant aggregator holds the new model call while the old audio plays (1.13 and later)
HOLDS_CONTEXT = Version(version("pipecat-ai")) >= Version("1.13.0")
# PipelineWorker drains before it hands over (1.8 and later); before, LLMWorker finishes the call in the tool
DRAINS = "activate_worker" in vars(PipelineWorker)

TRIAGE = [
    "Hello, this is triage.",
    ("Let me transfer you to billing now.", [("transfer_to", {"agent": "billing"})]),
]
BILLING = ["Billing here, how can I help?"]
SAYS = ["hi", "billing please"]


@pytest.fixture
def workers(instrument: Any, spans: Spans) -> Spans:
    instrument(PipecatHandoffInstrumentor)
    return spans


def phases(spans: Spans, handoff: ReadableSpan) -> dict[str, ReadableSpan]:
    return {child.name.removeprefix("agent_handoff."): child for child in spans.children(handoff)}


async def test_one_handoff_has_its_phases_in_order(workers: Spans) -> None:
    run = await pw.run_workers({"triage": TRIAGE, "billing": BILLING}, SAYS, until_active="billing")
    assert run.active == {"triage": False, "billing": True}
    (handoff,) = workers.handoffs()
    attributes = handoff.attributes
    assert attributes[sc.FRAMEWORK] == sc.FRAMEWORK_PIPECAT_WORKERS
    assert (attributes[sc.FROM_AGENT_NAME], attributes[sc.TO_AGENT_NAME]) == ("triage", "billing")
    assert attributes[sc.OUTCOME] == sc.OUTCOME_COMPLETED
    assert attributes[sc.TRIGGER] == sc.TRIGGER_TOOL and attributes[sc.GEN_AI_TOOL_NAME] == "transfer_to"
    found = phases(workers, handoff)
    order = ["handler", "drain", "bus_crossing", "setup", "await_old_audio", "first_output"]
    if not HOLDS_CONTEXT:  # the new worker answers at once; its audio queues behind the old one's
        order.remove("await_old_audio")
    assert list(found) == order
    ordered = [found[name] for name in order]
    assert handoff.start_time == ordered[0].start_time and handoff.end_time == ordered[-1].end_time
    for before, after in itertools.pairwise(ordered):
        assert before.end_time == after.start_time  # back to back: nothing unattributed
    assert sc.UNATTRIBUTED_DURATION not in attributes
    if not HOLDS_CONTEXT:  # the new audio queues behind the old at the transport: no trace of it
        assert workers.named(sc.SPAN_FIRST_SPEECH) == []
        return
    # the old agent's audio (35 characters, 0.7 s) still played when billing was set up
    waited = found["await_old_audio"]
    assert waited.end_time - waited.start_time > 100_000_000
    (speech,) = workers.named(sc.SPAN_FIRST_SPEECH)
    assert speech.links[0].context.span_id == handoff.context.span_id
    assert speech.end_time >= handoff.end_time


async def test_an_unknown_target_is_rejected(workers: Spans) -> None:
    triage = ["Hello.", ("Transferring.", [("transfer_to", {"agent": "biling"})])]
    run = await pw.run_workers({"triage": triage, "billing": BILLING}, SAYS)
    assert run.active == {"triage": False, "billing": False}  # what Pipecat does: nobody answers
    (handoff,) = workers.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_REJECTED
    assert handoff.attributes[sc.REJECTION_REASON] == sc.REJECTED_UNKNOWN_AGENT
    assert handoff.attributes[sc.TO_AGENT_NAME] == "biling"
    assert handoff.status.status_code is StatusCode.ERROR


async def test_two_transfers_in_one_response_both_show_the_second_marked(workers: Spans) -> None:
    triage = [
        "Hello.",
        ("Transferring.", [("transfer_to", {"agent": "billing"}), ("transfer_to", {"agent": "support"})]),
    ]
    run = await pw.run_workers(
        {"triage": triage, "billing": BILLING, "support": ["Support here."]},
        SAYS,
        until_active="support",
        settle=False,
    )
    assert run.active == {"triage": False, "billing": True, "support": True}  # two agents answer
    first, second = sorted(workers.handoffs(), key=lambda s: s.attributes[sc.SEQUENCE])
    assert first.attributes[sc.TO_AGENT_NAME] == "billing" and sc.FROM_INACTIVE not in first.attributes
    assert second.attributes[sc.TO_AGENT_NAME] == "support" and second.attributes[sc.FROM_INACTIVE] is True


async def test_pipecat_does_the_same_with_and_without_us(instrument: Any, spans: Spans) -> None:
    async def run() -> pw.WorkersRun:
        return await pw.run_workers({"triage": TRIAGE, "billing": BILLING}, SAYS, until_active="billing")

    plain = await run()
    instrument(PipecatHandoffInstrumentor)
    traced = await run()
    assert len(spans.handoffs()) == 1
    assert traced == plain
    assert "TTSAudioRawFrame" in plain.frames


@pytest.mark.skipif(not DRAINS, reason="before pipecat-ai 1.8 the worker finishes the call in the tool")
async def test_a_handoff_cancelled_by_an_interruption_ends(workers: Spans) -> None:
    """A transfer tool left cancellable (``@tool``'s default) is cancelled when the caller speaks
    during the drain: the handoff ends there, skipped, and nothing of ours stays open."""
    triage = ["Hello.", ("Transferring.", [("transfer_now", {"agent": "billing"})])]
    run = await pw.run_workers({"triage": triage, "billing": BILLING}, SAYS, interrupt_drain=True)
    assert run.active["billing"] is False
    (handoff,) = workers.handoffs()
    assert handoff.attributes[sc.OUTCOME] == sc.OUTCOME_SKIPPED
    assert handoff.attributes[sc.ERROR_TYPE] == sc.ERROR_CANCELLED
    assert list(phases(workers, handoff)) == ["handler", "drain"]


async def test_uninstrument_leaves_no_wrapper_handler_or_filter(instrument: Any, spans: Spans) -> None:
    from pipecat.bus.messages import BusActivateWorkerMessage
    from pipecat.workers.base_worker import BaseWorker
    from pipecat.workers.llm import LLMWorker
    from wrapt import ObjectProxy

    instrumentor = instrument(PipecatHandoffInstrumentor)
    await pw.run_workers({"triage": TRIAGE, "billing": BILLING}, SAYS, until_active="billing")
    assert len(spans.handoffs()) == 1
    instrumentor.uninstrument()
    methods = [
        vars(BaseWorker)["activate_worker"],
        vars(BaseWorker)["_handle_worker_activate"],
        vars(LLMWorker)["_track_tool_call"],
        vars(BusActivateWorkerMessage)["__init__"],
    ]
    assert not any(isinstance(m, ObjectProxy) for m in methods)
    plain = await pw.run_workers({"triage": TRIAGE, "billing": BILLING}, SAYS, until_active="billing")
    assert plain.active == {"triage": False, "billing": True}
    assert len(spans.handoffs()) == 1  # nothing more once uninstrumented


async def test_a_frame_awaited_leaves_the_apps_handler_and_filter_as_they_were() -> None:
    from pipecat.frames.frames import LLMTextFrame, TTSAudioRawFrame
    from pipecat.pipeline.pipeline import Pipeline

    from otel_handoff.pipecat._frames import DOWNSTREAM, FrameAwaited

    worker = PipelineWorker(Pipeline([]))
    handlers = worker._event_handlers["on_frame_reached_downstream"].handlers
    arrived: list[Any] = []
    audio = TTSAudioRawFrame(audio=b"\0\0", sample_rate=16000, num_channels=1)

    # alone on the event: our handler and type while awaited, then nothing of ours
    awaited = FrameAwaited(worker, DOWNSTREAM, (TTSAudioRawFrame,), lambda now, frame: arrived.append(frame))
    assert awaited.listening and worker.reached_downstream_types == (TTSAudioRawFrame,)
    await handlers[0](worker, LLMTextFrame("not awaited"))
    await handlers[0](worker, audio)
    assert arrived == [audio] and handlers == [] and worker.reached_downstream_types == ()

    # the app's handler filters text: our audio would reach it, so nothing is awaited
    async def apps(_: Any, frame: Any) -> None:
        pass

    worker.add_event_handler("on_frame_reached_downstream", apps)
    worker.set_reached_downstream_filter((LLMTextFrame,))
    refused = FrameAwaited(worker, DOWNSTREAM, (TTSAudioRawFrame,), lambda now, frame: None)
    assert not refused.listening
    refused.stop()
    assert handlers == [apps] and worker.reached_downstream_types == (LLMTextFrame,)

    # its filter holds our type already: awaited beside it, and its filter left as it was
    beside = FrameAwaited(worker, DOWNSTREAM, (LLMTextFrame,), lambda now, frame: None)
    assert beside.listening and len(handlers) == 2
    beside.stop()
    assert handlers == [apps] and worker.reached_downstream_types == (LLMTextFrame,)


def test_finding_a_tts_imports_no_module_the_app_did_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipecat's TTS module warns of a deprecated class as it is imported: an app without a TTS
    never imports it, and neither do we."""
    import sys

    from pipecat.processors.frame_processor import FrameProcessor

    from otel_handoff.pipecat import _workers

    class Plain(FrameProcessor):
        pass

    monkeypatch.delitem(sys.modules, "pipecat.services.tts_service")
    assert not _workers._kind(Plain) & _workers._TTS
    assert "pipecat.services.tts_service" not in sys.modules
