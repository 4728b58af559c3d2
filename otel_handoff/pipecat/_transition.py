"""One Flows node transition as plain data, and the record it becomes once the new node is set.

The hot path only takes timestamps. When ``_set_node`` returns (or raises), the transition is
handed to the core emitter as a :class:`HandoffRecord`, which creates the handoff span and its
phase children together with their real start and end times, so nothing is ever left open or
made current, whatever the pipeline does meanwhile.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.emit import Emitted
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry
from ._downlink import emit_first_speech


@dataclass
class Transition:
    """From the request (the handler starts, or the app asks) until the new node is set."""

    trigger: str
    start_ns: int
    parent: otel_context.Context | None
    sequence: int  # counted when requested
    tool_name: str | None = None
    tool_call_id: str | None = None
    from_node: str | None = None
    to_node: str | None = None
    context_strategy: str | None = None
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    requested_ns: int = 0  # the handler returned the next node (tool) or the app asked (api)
    waited: bool = False  # another function call was still running when it could have run
    executing_ns: int = 0  # _set_node began
    set_ns: int = 0  # _set_node returned: the new node is set
    emitted: Emitted | None = None  # once emitted: first_speech links to it


@dataclass
class FlowsTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    flows: weakref.WeakKeyDictionary[Any, FlowState] = field(default_factory=weakref.WeakKeyDictionary)
    # Pipecat gives an observer added to a running pipeline its proxy (1.7+): ours only while needed
    observer_on_demand: bool = False
    source_events: bool = False  # the worker reports chosen frames reaching its source (first speech)

    def state(self, flow_manager: Any) -> FlowState:
        state = self.flows.get(flow_manager)
        if state is None:
            state = self.flows[flow_manager] = FlowState(self, _conversation_id(flow_manager))
        return state


def _conversation_id(flow_manager: Any) -> str | None:
    """The conversation id the app gave its ``PipelineWorker`` (Pipecat's own spans carry it)."""
    value = getattr(getattr(flow_manager, "_worker", None), "_conversation_id", None)
    return value if isinstance(value, str) and value else None


class FlowState:
    """One FlowManager: its requested transition, its conversation, speech awaited."""

    __slots__ = ("__weakref__", "awaiting_speech", "conversation", "pending", "telemetry", "watch")

    def __init__(self, telemetry: FlowsTelemetry, conversation_id: str | None = None) -> None:
        self.telemetry = telemetry
        self.pending: Transition | None = None  # requested by a tool, not yet executing
        self.awaiting_speech: Transition | None = None  # set, until the bot speaks in the new node
        self.watch: Any = None  # our observer and handler on the flow's worker (``_observer.WorkerWatch``)
        # one trace per conversation when Pipecat traces nothing (an empty context: a new trace)
        self.conversation = Conversation(telemetry, time.time_ns(), otel_context.Context(), conversation_id)

    def request(self, transition: Transition) -> None:
        """A handler asked for a transition; one still waiting was overridden by it."""
        if self.pending is not None:
            self.drop_pending(transition.requested_ns)
        self.pending = transition

    def drop_pending(self, now_ns: int) -> None:
        """The requested transition will not run: skipped, with the wait it spent, if any."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.waited and sc.PHASE_FUNCTION_CALL_WAIT not in pending.phases:
            pending.phases[sc.PHASE_FUNCTION_CALL_WAIT] = PhaseRecord(
                sc.PHASE_FUNCTION_CALL_WAIT, pending.requested_ns, now_ns
            )
        self.emit(pending, sc.OUTCOME_SKIPPED, now_ns)

    def emit(self, t: Transition, outcome: str, end_ns: int, error: BaseException | None = None) -> None:
        """The transition as a record; the summary is its own phase, so not in the context update."""
        context_update = t.phases.get(sc.PHASE_CONTEXT_UPDATE)
        summary = t.phases.get(sc.PHASE_SUMMARY)
        if context_update is not None and context_update.end_ns and summary is not None:
            summary_ns = max(0, (summary.end_ns or context_update.end_ns) - summary.start_ns)
            context_update.own_ns = context_update.end_ns - context_update.start_ns - summary_ns
        attributes = {sc.CONTEXT_STRATEGY: t.context_strategy} if t.context_strategy else {}
        t.emitted = self.conversation.emit(
            start_ns=t.start_ns,
            end_ns=end_ns,
            parent=t.parent,
            sequence=t.sequence,
            outcome=outcome,
            from_agent=t.from_node,
            to_agent=t.to_node,
            trigger=t.trigger,
            tool_name=t.tool_name,
            tool_call_id=t.tool_call_id,
            error=error,
            attributes=attributes,
            phases=list(t.phases.values()),
        )

    def first_speech(self, now_ns: int) -> None:
        """The bot started speaking: the dead air of the last handoff ends here."""
        t, self.awaiting_speech = self.awaiting_speech, None
        if self.watch is not None:
            self.watch.speech_seen()
        if t is None or t.emitted is None:
            return
        worker = self.watch.worker() if self.watch is not None else None
        started = self.watch.speech_started_ns() if self.watch is not None else None
        if started is not None and t.set_ns <= started <= now_ns:
            now_ns = started  # the output transport's start of this run of speech: its first write
        phase = PhaseRecord(sc.PHASE_FIRST_SPEECH, t.start_ns, max(now_ns, t.start_ns))
        emit_first_speech(self.telemetry, t.emitted, phase, worker)

    def finish(self, now_ns: int) -> None:
        """The conversation ended (or tracing stopped): nothing stays open or pending."""
        self.drop_pending(now_ns)
        self.awaiting_speech = None
        self.conversation.end(now_ns)
