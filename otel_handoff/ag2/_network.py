"""Handoffs of ag2 1.x workflow channels (``ag2.network``): where they are seen, and their spans.

A workflow channel routes by data: each accepted turn (an ``ag2.packet`` or ``ag2.msg.text``
envelope) is folded by ``WorkflowAdapter.fold``, which decides who speaks next or that the
channel ends. Three observation points, all public AG2 surface:

- ``WorkflowAdapter.fold`` (the adapter protocol's method): the moment and the folded state of
  a decision. The hub also re-runs ``fold`` when it replays its log (``Hub.hydrate``) and a
  remote client re-runs it for ``adapter_state``; so a fold is only *noted* here, per channel
  and envelope, and becomes a handoff only when the hub says the envelope was posted;
- the hub's own per-event hook methods (``Hub.on_envelope_posted``: the envelope was accepted
  live; ``Hub.on_channel_event`` "closed"; ``Hub.on_turn_failed``), which ``Hub._fan_out``
  awaits before the registered listeners. Observing there registers no listener, so the app's
  listener list and ``Hub.health()`` stay exactly its own; a hub subclass that overrides a hook
  gets its override observed too (once, even when it calls ``super()``);
- ``Agent.ask``: the next agent's turn begins (the handler passes the channel and the folded
  state it acts on in ``dependencies``), which ends the handoff.

A decision is kept as plain data and becomes a span, with its real start and end times, once
its fate is known; nothing is made current, nothing is left open. Model-written text
(``Handoff.reason``, ``Finish.summary``/``reason``, the close reason they set) is never read
into a span.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections import OrderedDict
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ag2.network import (
    AGENT_CLIENT_DEP,
    CHANNEL_DEP,
    CHANNEL_STATE_DEP,
    EV_PACKET,
    EV_TEXT,
    WORKFLOW_TYPE,
    ToolCalled,
    TransitionGraph,
    WorkflowState,
)
from ag2.network.hub.core import Hub
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..core import schema as sc
from ..core.conversation import Conversation
from ..core.faults import guard, report
from ..core.instrumentor import wrap_where_defined
from ..core.shapes import loads_in_sequence
from ..core.spans import HandoffTelemetry

_SUBSTANTIVE = (EV_TEXT, EV_PACKET)
_FOLDS_KEPT = 8  # per channel: folds noted but not yet confirmed as posted (replays overwrite)
_EARLY_TURNS_KEPT = 8  # per channel: turns that began before the hub told us of their envelope
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass
class Decision:
    """One routing decision of a workflow channel, before we know where it lands."""

    envelope_id: str
    kind: str
    start_ns: int
    from_agent_id: str
    to_agent_id: str | None  # None: the decision ends the channel
    parent: otel_context.Context | None
    condition_type: str | None = None
    target_type: str | None = None
    tool_name: str | None = None
    sequence: int = 0


@dataclass
class NetworkTelemetry(HandoffTelemetry):
    """What the workflow-channel wrappers and listeners share, built once at ``instrument()``."""

    channels: dict[str, ChannelTrack] = field(default_factory=dict)
    # per adapter (one per hub, so a closed hub's notes go with it): channel id -> envelope id ->
    # (fold time, folded state), decisions not yet confirmed as posted
    folds: weakref.WeakKeyDictionary[Any, dict[str, OrderedDict[str, tuple[int, Any]]]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    # hubs opened while instrumented -> what we observe of each
    hubs: weakref.WeakKeyDictionary[Any, HubTracker] = field(default_factory=weakref.WeakKeyDictionary)
    # (hub subclass, hook) whose override was wrapped on first sight; undone by uninstrument()
    lazily_wrapped: list[tuple[type, str]] = field(default_factory=list)

    def attach(self, hub: Any) -> None:
        if not self.enabled or hub in self.hubs:
            return
        self.hubs[hub] = HubTracker(self, hub)
        for hook in HUB_HOOKS:  # a subclass's own override of a hook is observed too
            wrapper = functools.partial(wrap_hub_hook, self, hook)
            wrap_where_defined(
                type(hub), hook, lambda _original, w=wrapper: w, self.lazily_wrapped, unless=Hub
            )

    def detach_all(self) -> None:
        """uninstrument(): no hub is observed any more, every open channel's spans ended."""
        self.enabled = False
        self.hubs.clear()
        now = time.time_ns()
        for track in list(self.channels.values()):
            track.close(now, closed_as_decided=False)
        self.channels.clear()
        self.folds.clear()

    def track(self, channel_id: str, hub: Any, start_ns: int) -> ChannelTrack:
        track = self.channels.get(channel_id)
        if track is None:
            track = self.channels[channel_id] = ChannelTrack(self, channel_id, hub, start_ns)
        return track

    # --- what the wrappers report -------------------------------------------------------
    def note_fold(self, adapter: Any, envelope: Any, start_ns: int, state: Any) -> None:
        if envelope.event_type not in _SUBSTANTIVE or not isinstance(state, WorkflowState):
            return
        folds = self.folds.setdefault(adapter, {}).setdefault(envelope.channel_id, OrderedDict())
        folds[envelope.envelope_id] = (start_ns, state)
        while len(folds) > _FOLDS_KEPT:
            folds.popitem(last=False)

    def turn_begins(self, dependencies: Any) -> None:
        """``Agent.ask`` of a channel participant: the turn the folded state gave it begins."""
        if not isinstance(dependencies, dict):
            return
        state = dependencies.get(CHANNEL_STATE_DEP)
        if not isinstance(state, WorkflowState) or not state.last_envelope_id:
            return
        channel = dependencies.get(CHANNEL_DEP)
        client = dependencies.get(AGENT_CLIENT_DEP)
        track = self.channels.get(getattr(channel, "channel_id", None))
        if track is not None:
            track.turn_begins(state.last_envelope_id, getattr(client, "agent_id", None), time.time_ns())


class HubTracker:
    """What is observed of one hub opened while instrumented, through its own hook methods."""

    def __init__(self, telemetry: NetworkTelemetry, hub: Any) -> None:
        self._telemetry = telemetry
        self._hub = weakref.ref(hub)

    def on_envelope_posted(self, envelope: Any, metadata: Any, *_: Any) -> None:
        if metadata.manifest.type == WORKFLOW_TYPE:
            self._posted(envelope)

    def on_channel_event(self, channel_id: str, kind: str, *_: Any) -> None:
        if kind == "closed":
            self._closed(channel_id)

    def on_turn_failed(self, channel_id: str, agent_id: str, envelope_id: str, exc: Any, *_: Any) -> None:
        track = self._telemetry.channels.get(channel_id)
        if track is not None:
            track.turn_failed(envelope_id, agent_id, exc)

    def _posted(self, envelope: Any) -> None:
        telemetry = self._telemetry
        if envelope.event_type not in _SUBSTANTIVE:
            return
        noted = self._folds(envelope.channel_id).pop(envelope.envelope_id, None)
        if noted is None:
            return  # folded before instrument(), or not by a workflow adapter
        start_ns, state = noted
        decision = classify(envelope, state, start_ns)
        if decision is not None:
            telemetry.track(envelope.channel_id, self._hub(), start_ns).decide(decision)

    def _closed(self, channel_id: str) -> None:
        telemetry = self._telemetry
        self._folds(channel_id).clear()
        track = telemetry.channels.pop(channel_id, None)
        if track is not None:
            track.close(time.time_ns(), closed_as_decided=True)

    def _folds(self, channel_id: str) -> OrderedDict[str, tuple[int, Any]]:
        """The folds noted for a channel of this hub (its adapter's), empty if none."""
        hub = self._hub()
        try:
            adapter = hub.adapter_for(channel_id) if hub is not None else None
        except Exception:  # a channel this hub no longer knows
            return OrderedDict()
        return self._telemetry.folds.get(adapter, {}).get(channel_id) or OrderedDict()

    def hub_closing(self) -> None:
        """The hub closes: channels it leaves open end their handoffs as skipped."""
        telemetry = self._telemetry
        hub = self._hub()
        now = time.time_ns()
        for channel_id, track in list(telemetry.channels.items()):
            if track.hub() is hub:
                del telemetry.channels[channel_id]
                track.close(now, closed_as_decided=False)


def classify(envelope: Any, state: Any, start_ns: int) -> Decision | None:
    """What kind of decision ``fold`` took for ``envelope``; None when the speaker stays.

    Mirrors ``WorkflowAdapter.fold``/``on_accepted``: a ``finish`` routing ends the channel, a
    ``handoff`` routing with a target names the next speaker, anything else goes through the
    graph's rules (the first whose condition holds, by priority) and its default; a channel that
    reached ``max_turns`` closes whatever was decided. Conditions are pure predicates of
    ``(state, envelope)`` by AG2's contract, so evaluating them again here is safe.
    """
    routing = ((envelope.event_data or {}).get("routing") or {}) if envelope.event_type == EV_PACKET else {}
    sender = envelope.sender_id
    next_speaker = state.expected_next_speaker
    decision = Decision(
        envelope.envelope_id, sc.KIND_TRANSITION, start_ns, sender, next_speaker, _envelope_parent(envelope)
    )
    graph = _graph(state.graph_data)
    if next_speaker is not None and graph.max_turns is not None and state.turn_count >= graph.max_turns:
        decision.kind, decision.to_agent_id = sc.KIND_MAX_TURNS, None
        return decision
    if next_speaker == sender:
        return None  # the same agent speaks again: not a handoff
    kind = routing.get("kind")
    if kind == "finish":
        decision.kind, decision.tool_name = sc.KIND_FINISH, routing.get("tool")
    elif kind == "handoff" and routing.get("target"):
        decision.kind, decision.tool_name = sc.KIND_HANDOFF, routing.get("tool")
    else:
        rule = next(
            (
                t
                for t in sorted(graph.transitions, key=lambda t: t.priority)
                if t.when.evaluate(state, envelope)
            ),
            None,
        )
        if rule is None:
            decision.kind, decision.target_type = sc.KIND_DEFAULT, type(graph.default_target).__name__
        else:
            decision.condition_type = type(rule.when).__name__
            decision.target_type = type(rule.then).__name__
            if isinstance(rule.when, ToolCalled):
                decision.kind, decision.tool_name = sc.KIND_TOOL_CALLED, rule.when.tool_name
    return decision


# graph data -> its TransitionGraph, by identity: a channel's state keeps the same dict fold after fold
_GRAPHS: dict[int, tuple[Any, Any]] = {}


def _graph(data: Any) -> Any:
    cached = _GRAPHS.get(id(data))
    if cached is not None and cached[0] is data:
        return cached[1]
    graph = TransitionGraph.loads(data)
    if len(_GRAPHS) >= 64:  # a few channels at a time; old ones need no entry
        _GRAPHS.clear()
    _GRAPHS[id(data)] = (data, graph)
    return graph


def _envelope_parent(envelope: Any) -> otel_context.Context | None:
    """The ``network.envelope`` span AG2's own tracing stamped on the envelope, if it is on."""
    if not envelope.trace_id:
        return None
    context = _PROPAGATOR.extract({"traceparent": envelope.trace_id})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class ChannelTrack:
    """One workflow channel: its pending decision and its conversation (count, maybe a root)."""

    __slots__ = ("channel_id", "conversation", "early_turns", "hub", "pending", "telemetry")

    def __init__(self, telemetry: NetworkTelemetry, channel_id: str, hub: Any, start_ns: int) -> None:
        self.telemetry = telemetry
        self.channel_id = channel_id
        self.hub = weakref.ref(hub) if hub is not None else lambda: None
        self.pending: Decision | None = None
        # envelope id -> (agent id, time): turns begun before the hub told us their envelope was posted
        self.early_turns: OrderedDict[str, tuple[str | None, int]] = OrderedDict()
        # the channel id is AG2's own name for the conversation: gen_ai.conversation.id
        self.conversation = Conversation(telemetry, start_ns, conversation_id=channel_id)

    def decide(self, decision: Decision) -> None:
        decision.sequence = self.conversation.next_sequence()
        if self.pending is not None:  # never landed: the channel moved on without its turn
            self._emit(self.pending, sc.OUTCOME_SKIPPED, decision.start_ns)
        early = self.early_turns.pop(decision.envelope_id, None)
        if early is not None and decision.to_agent_id is not None and early[0] == decision.to_agent_id:
            self._emit(decision, sc.OUTCOME_COMPLETED, early[1])
        else:
            self.pending = decision

    def turn_begins(self, envelope_id: str, agent_id: str | None, now_ns: int) -> None:
        pending = self.pending
        if pending is not None and pending.envelope_id == envelope_id:
            if agent_id == pending.to_agent_id:
                self.pending = None
                self._emit(pending, sc.OUTCOME_COMPLETED, now_ns)
            return
        self.early_turns[envelope_id] = (agent_id, now_ns)
        while len(self.early_turns) > _EARLY_TURNS_KEPT:
            self.early_turns.popitem(last=False)

    def turn_failed(self, envelope_id: str, agent_id: str, error: BaseException) -> None:
        pending = self.pending
        if pending is not None and pending.envelope_id == envelope_id and pending.to_agent_id == agent_id:
            self.pending = None
            self._emit(pending, sc.OUTCOME_ERROR, time.time_ns(), error)

    def close(self, end_ns: int, closed_as_decided: bool) -> None:
        """The channel closed (or is abandoned): a pending decision that ended it has completed."""
        pending, self.pending = self.pending, None
        try:
            if pending is not None:
                landed = closed_as_decided and pending.to_agent_id is None
                self._emit(pending, sc.OUTCOME_COMPLETED if landed else sc.OUTCOME_SKIPPED, end_ns)
        finally:
            self.conversation.end(end_ns)

    def _emit(
        self, decision: Decision, outcome: str, end_ns: int, error: BaseException | None = None
    ) -> None:
        """The decision as a record: decision-to-landing is its duration."""
        hub = self.hub()
        attributes: dict[str, Any] = {}
        if decision.condition_type:
            attributes[sc.CONDITION_TYPE] = decision.condition_type
        if decision.target_type:
            attributes[sc.TARGET_TYPE] = decision.target_type
        to_id = decision.to_agent_id
        self.conversation.land(
            decision,
            outcome,
            end_ns,
            error,
            from_agent=_name(hub, decision.from_agent_id),
            from_agent_id=decision.from_agent_id,
            to_agent=_name(hub, to_id) if to_id is not None else None,
            to_agent_id=to_id,
            attributes=attributes,
        )


def _name(hub: Any, agent_id: str) -> str:
    """The agent's ``Passport`` name (its id if the hub is gone or does not know it)."""
    return hub.name_for(agent_id) if hub is not None else agent_id


# --- wrappers -------------------------------------------------------------------------------
def wrap_fold(telemetry: NetworkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    start_ns = time.time_ns()
    state = wrapped(*args, **kwargs)
    if telemetry.enabled:
        envelope = args[0] if args else kwargs.get("envelope")
        guard("WorkflowAdapter.fold", telemetry.note_fold, instance, envelope, start_ns, state)
    return state


def wrap_ask(telemetry: NetworkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    # not a coroutine of ours: the turn begins when the handler calls ask; its coroutine is AG2's own
    if telemetry.enabled and "dependencies" in kwargs:
        guard("Agent.ask", telemetry.turn_begins, kwargs["dependencies"])
    return wrapped(*args, **kwargs)


def wrap_hub_init(telemetry: NetworkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    guard("Hub.__init__", telemetry.attach, instance)
    return result


# the hub's own per-event hooks we observe (``Hub._fan_out`` awaits them before any listener)
HUB_HOOKS = ("on_envelope_posted", "on_channel_event", "on_turn_failed")


def hub_awaits_own_hooks() -> bool:
    """Does ``Hub._fan_out`` call the hub's own hook methods (ag2 1.0 to 1.2 do)? Read from its
    code, ``getattr(self, method_name``: an install without sources has it too."""
    return loads_in_sequence(getattr(Hub, "_fan_out", None), "getattr", "self", "method_name")


_IN_HOOK: ContextVar[bool] = ContextVar("otel_handoff_ag2_hub_hook", default=False)


async def wrap_hub_hook(
    telemetry: NetworkTelemetry, hook: str, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    """The hub's own hook runs as it would; then the event is observed, once per event.

    Once: a subclass override calling ``super()`` reaches the wrapped base method inside it.
    """
    if _IN_HOOK.get():
        return await wrapped(*args, **kwargs)
    token = _IN_HOOK.set(True)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _IN_HOOK.reset(token)
        tracker = telemetry.hubs.get(instance) if telemetry.enabled else None
        if tracker is not None:
            try:
                getattr(tracker, hook)(*args, *kwargs.values())
            except Exception as exc:
                report(f"Hub.{hook}", exc)


async def wrap_hub_close(
    telemetry: NetworkTelemetry, wrapped: Any, instance: Any, args: Any, kwargs: Any
) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        tracker = telemetry.hubs.get(instance)
        if tracker is not None:
            guard("Hub.close", tracker.hub_closing)
