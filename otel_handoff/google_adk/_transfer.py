"""Google ADK transfers as timestamps: one :class:`Run` per ``run_async``/``run_live``, one
:class:`Transfer` per ``EventActions.transfer_to_agent``, one record once the new agent speaks.

A text transfer runs from the old agent's model response that asked for it to the new agent's
first model response: the tool, the two events the app's own loop holds (ADK waits for it),
the new agent's setup (callbacks, instruction providers, request building) and its model call.
A live transfer runs until the new agent's first audio reaches the app, which is the silence the
caller hears: the tool, ADK's fixed ``DEFAULT_TRANSFER_AGENT_DELAY`` sleep, closing the old
connection, the new agent's setup, opening its connection, replaying the history, first audio.
"""

from __future__ import annotations

import asyncio
import functools
import re
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..core import crossing
from ..core import schema as sc
from ..core.conversation import Conversation, Conversations
from ..core.record import PhaseRecord
from ..core.spans import HandoffTelemetry

# the live run whose agents run in this task (set when a live agent starts; ADK's own task)
LIVE_RUN: ContextVar[weakref.ref[Run] | None] = ContextVar("otel_handoff_google_adk_live", default=None)


@dataclass
class AdkTelemetry(HandoffTelemetry):
    """What every wrapper needs, built once at ``instrument()``."""

    transfer_delay: float | None = None  # the release's DEFAULT_TRANSFER_AGENT_DELAY, if found
    # text transfers whose new agent's model call runs: only then does a partial response matter
    awaiting_output: int = 0
    runs: dict[str, Run] = field(default_factory=dict)  # session id -> its run in progress
    # per session: the handoff count goes on across its runs
    conversations: Conversations = field(init=False)
    # (live model or connection class, method) wrapped on first sight; undone by uninstrument()
    lazily_wrapped: list[tuple[type, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.conversations = Conversations(self)


def span_context() -> otel_context.Context | None:
    """The current context when it holds a span (ADK's ``invoke_agent``, or the app's)."""
    if trace.get_current_span().get_span_context().is_valid:
        return otel_context.get_current()
    return None


class Run:
    """One ``run_async`` or ``run_live`` call: what its events and callbacks showed so far."""

    __slots__ = (
        "__weakref__",
        "agent_contexts",
        "agent_tasks",
        "arrived_ns",
        "conversation",
        "invocation_id",
        "live",
        "model_end_ns",
        "parent",
        "released_ns",
        "root_agent",
        "telemetry",
        "tools",
        "transfers",
    )

    def __init__(
        self, telemetry: AdkTelemetry, conversation: Conversation, live: bool, root_agent: Any
    ) -> None:
        self.telemetry = telemetry
        self.root_agent = root_agent
        self.conversation = conversation
        self.live = live
        self.invocation_id: str | None = None  # ADK's id of this run (e-…), once a callback shows it
        self.parent = span_context()  # the app's span around the run, if any
        self.arrived_ns = 0  # the last event reached the app
        self.released_ns = 0  # the app asked for the next one
        self.model_end_ns: dict[str, int] = {}  # agent -> its last model response
        self.agent_contexts: dict[str, otel_context.Context] = {}  # agent -> its invoke_agent span
        self.agent_tasks: dict[str, Any] = {}  # agent -> the task it started in
        self.tools: dict[str | None, tuple[int, int, int]] = {}  # call id -> (start, event in, out)
        self.transfers: list[Transfer] = []  # asked for, until the new agent's first output

    # --- what the callbacks show -------------------------------------------------------------

    def agent_started(self, name: str, now: int, agent: Any = None) -> None:
        context = span_context()
        if context is not None:
            self.agent_contexts[name] = context
        task = asyncio.current_task()
        self.agent_tasks[name] = task
        for transfer in self.transfers:
            if transfer.to_agent == name and not transfer.agent_start_ns:
                transfer.agent_start_ns = now
                # ADK 2's node runtime starts the new agent in a task of its own; the nested path
                # (other roots, 1.x) runs it inside the old agent's flow, in the same task
                if not self.live:
                    nested = self.agent_tasks.get(transfer.from_agent or "") is task
                    transfer.path = sc.PATH_NESTED if nested else sc.PATH_NODE
                    url = remote_url(agent)
                    if url is not None:
                        transfer.send_from_here(url, self._parent_of(transfer))

    def _parent_of(self, transfer: Transfer) -> otel_context.Context:
        """Where a transfer's span goes: under the asking agent's span, the run's, or a new trace."""
        return self.agent_contexts.get(transfer.from_agent or "") or self.parent or otel_context.Context()

    def tool_started(self, call_id: str | None, now: int) -> None:
        self.tools[call_id] = (now, self.arrived_ns, self.released_ns)

    def tool_ended(
        self, tool_name: str | None, call_id: str | None, from_agent: str | None, to_agent: Any, now: int
    ) -> None:
        """A tool returned with ``actions.transfer_to_agent`` set: a transfer is asked for."""
        start, fc_in, fc_out = self.tools.pop(call_id, (now, 0, 0))
        if not isinstance(to_agent, str) or not to_agent:
            return
        model_end = self.model_end_ns.get(from_agent or "", 0)
        begin = model_end if 0 < model_end <= start else start
        transfer = Transfer(
            run=self,
            start_ns=begin,
            sequence=self.conversation.next_sequence(),
            from_agent=from_agent,
            to_agent=to_agent,
            trigger=sc.TRIGGER_LIVE_TOOL if self.live else sc.TRIGGER_TOOL,
            tool_name=tool_name,
            tool_call_id=call_id,
            tool_start_ns=start,
            tool_end_ns=now,
        )
        if not self.live and begin <= fc_in:  # the function call's event, held by the app's loop
            transfer.deliveries.append((fc_in, fc_out))
        self.transfers.append(transfer)

    def model_responded(self, agent: str, now: int) -> None:
        self.model_end_ns[agent] = now
        if self.transfers and not self.live:
            for transfer in self.transfers:
                if transfer.to_agent == agent and transfer.model_start_ns:
                    self.transfers.remove(transfer)
                    transfer.emit(now, spoke=True)
                    return

    def model_call_starting(self, agent: str, now: int) -> None:
        """The new agent's before_model callbacks are done: its model call starts."""
        for transfer in self.transfers:
            if transfer.to_agent == agent and transfer.fr_out_ns and not transfer.model_start_ns:
                transfer.model_start_ns = now
                self.telemetry.awaiting_output += 1

    def awaits_model_call(self, agent: str) -> bool:
        return any(t.to_agent == agent and t.fr_out_ns and not t.model_start_ns for t in self.transfers)

    # --- what the app's loop shows -----------------------------------------------------------

    def event_released(self, event: Any, arrived: int, released: int) -> None:
        """An event the app received (``arrived``) and let go of (``released``), while watching."""
        actions = getattr(event, "actions", None)
        target = getattr(actions, "transfer_to_agent", None)
        if target:
            self._transfer_event(event, target, arrived, released)
        elif not self.live:
            for transfer in self.transfers:
                if transfer.remote_url is not None and event.author == transfer.to_agent:
                    self._remote_event(transfer, event, arrived)
                    return
        else:
            for transfer in self.transfers:
                if transfer.connect_start_ns and event.author == transfer.to_agent and _speaks(event):
                    self.transfers.remove(transfer)
                    transfer.emit(arrived, spoke=True)
                    return

    def _remote_event(self, transfer: Transfer, event: Any, arrived: int) -> None:
        """An event of a remote target (ADK makes one of each A2A stream item): the first is the
        stream open; an error ends the transfer; the first content that is not a thought (the
        task and its status come as thoughts) is its first output."""
        if not transfer.remote_first_ns:
            transfer.remote_first_ns = arrived
        if getattr(event, "error_message", None) or getattr(event, "error_code", None):
            self.transfers.remove(transfer)
            status = _http_status(event)
            if status is not None:
                transfer.remote_status = status
            if not transfer.sent_ns:
                transfer.emit(arrived, error=sc.ERROR_REMOTE_UNREACHABLE)
            elif status is not None and 400 <= status < 500:  # the server refused the request
                transfer.emit(arrived, rejected=sc.REJECTED_REMOTE_REFUSED)
            else:
                transfer.emit(arrived, error=sc.ERROR_REMOTE_FAILED)
        elif _says(event):
            self.transfers.remove(transfer)
            transfer.emit(arrived, spoke=True)

    def _transfer_event(self, event: Any, target: str, arrived: int, released: int) -> None:
        """The event carrying the transfer: ADK switches to ``target``; other requests are refused."""
        chosen = None
        for transfer in list(self.transfers):
            if transfer.fr_in_ns:
                continue
            if transfer.to_agent == target and chosen is None:
                chosen = transfer
            else:
                self.transfers.remove(transfer)
                transfer.emit(arrived, rejected=sc.REJECTED_MULTIPLE)
        if chosen is None:  # set by an event, not a tool
            author = getattr(event, "author", None)
            chosen = Transfer(
                run=self,
                start_ns=arrived,
                sequence=self.conversation.next_sequence(),
                from_agent=author,
                to_agent=target,
                trigger=sc.TRIGGER_EVENT,
                tool_name=None,
                tool_call_id=None,
            )
            self.transfers.append(chosen)
        chosen.fr_in_ns = arrived
        chosen.fr_out_ns = released
        if not self.live:
            chosen.deliveries.append((arrived, released))

    # --- the live connections ----------------------------------------------------------------

    def closing(self, start: int, end: int) -> None:
        for transfer in self.transfers:
            if (transfer.tool_end_ns or transfer.fr_in_ns) and not transfer.close_start_ns:
                transfer.close_start_ns, transfer.close_end_ns = start, end

    def connecting(self, start: int, end: int) -> None:
        for transfer in self.transfers:
            if transfer.close_end_ns and not transfer.connect_start_ns:
                transfer.connect_start_ns, transfer.connect_end_ns = start, end

    def history_sent(self, start: int, end: int) -> None:
        for transfer in self.transfers:
            if transfer.connect_start_ns and not transfer.history_start_ns:
                transfer.history_start_ns, transfer.history_end_ns = start, end

    def finish(self, now: int, error: BaseException | None) -> None:
        """The run is over: transfers still awaiting the new agent's output end here. ADK refuses
        a target it cannot run (unknown, or ruled out by ``disallow_transfer_to_*``) by raising
        ``ValueError`` before the new agent starts: that transfer was rejected."""
        transfers, self.transfers = self.transfers, []
        for transfer in transfers:
            reason = None
            if isinstance(error, ValueError) and not transfer.agent_start_ns:
                known = getattr(self.root_agent, "find_agent", lambda _name: None)(transfer.to_agent)
                reason = sc.REJECTED_NOT_ALLOWED if known is not None else sc.REJECTED_UNKNOWN_AGENT
            transfer.emit(now, error=error, rejected=reason)
        self.conversation.run_ended()


# what ADK's RemoteA2aAgent puts in an error event's custom_metadata when the server answered
_A2A_STATUS_CODE = "a2a:status_code"
# a2a-sdk's text for an HTTP error it raised (``A2AClientError``), which ADK's error message quotes
_A2A_HTTP_ERROR = re.compile(r"\bHTTP Error (\d{3})\b")


def _http_status(event: Any) -> int | None:
    """The HTTP status a remote agent's server answered with, where ADK's error event says it
    (its metadata, or a2a-sdk's "HTTP Error NNN" it quotes); only the number is kept."""
    found = str((getattr(event, "custom_metadata", None) or {}).get(_A2A_STATUS_CODE, ""))
    if not found.isdigit():
        match = _A2A_HTTP_ERROR.search(getattr(event, "error_message", None) or "")
        found = match.group(1) if match else ""
    return int(found) if found.isdigit() else None


# agent class -> is it ADK's RemoteA2aAgent (or a subclass): looked up once per class
_REMOTE_CLASSES: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def remote_url(agent: Any) -> str | None:
    """A transfer target served elsewhere (ADK's ``RemoteA2aAgent``, not in task mode, which is
    delegation): the URL it reaches it by, scheme://host:port/path only; else None."""
    remote = _REMOTE_CLASSES.get(type(agent))
    if remote is None:
        remote = _REMOTE_CLASSES[type(agent)] = any(
            c.__name__ == "RemoteA2aAgent" for c in type(agent).__mro__
        )
    if not remote or getattr(agent, "mode", None) is not None:
        return None
    source = getattr(agent, "_agent_card_source", None)  # the card's URL, as the app gave it
    if not isinstance(source, str) or not source.startswith(("http://", "https://")):
        card = getattr(agent, "_agent_card", None)
        source = getattr(card, "url", None) or ""
        interfaces = getattr(card, "supported_interfaces", None)
        if not source and interfaces:
            source = getattr(interfaces[0], "url", "")
    return without_credentials(source) if source else ""


@functools.lru_cache(maxsize=64)  # the few agent cards an app calls, each on every transfer
def without_credentials(url: str) -> str:
    """``url`` as scheme://host[:port]/path: no userinfo, query or fragment (where secrets go)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _says(event: Any) -> bool:
    """Content the app shows: a part with text, data or a call that is not a thought."""
    content = getattr(event, "content", None)
    for part in getattr(content, "parts", None) or ():
        if getattr(part, "thought", None):
            continue
        if getattr(part, "text", None) or getattr(part, "inline_data", None) is not None:
            return True
        if getattr(part, "function_call", None) is not None:
            return True
    return False


def _speaks(event: Any) -> bool:
    """Audio (or, in a text-modality live session, text) in the event's content."""
    content = getattr(event, "content", None)
    for part in getattr(content, "parts", None) or ():
        if getattr(part, "inline_data", None) is not None or getattr(part, "text", None):
            return True
    return False


@dataclass(slots=True)
class Transfer:
    """One transfer, as timestamps until the new agent's first output (0: not seen)."""

    run: Run
    start_ns: int
    sequence: int
    from_agent: str | None
    to_agent: str
    trigger: str
    tool_name: str | None
    tool_call_id: str | None
    tool_start_ns: int = 0
    tool_end_ns: int = 0
    deliveries: list[tuple[int, int]] = field(default_factory=list)  # (reached the app, let go)
    fr_in_ns: int = 0  # the event carrying the transfer reached the app
    fr_out_ns: int = 0  # ... and the app asked for the next one
    agent_start_ns: int = 0  # the new agent's before_agent callbacks begin
    model_start_ns: int = 0  # text: the new agent's model call (after its before_model callbacks)
    close_start_ns: int = 0  # live: the old connection's close()
    close_end_ns: int = 0
    connect_start_ns: int = 0  # live: the new agent's connect()
    connect_end_ns: int = 0
    history_start_ns: int = 0  # live: the history sent to the new connection
    history_end_ns: int = 0
    path: str | None = None  # which ADK runtime switched agents (text)
    remote_url: str | None = None  # a remote target: the URL it is reached by ("" unknown)
    sending: crossing.Sending | None = None  # its span, opened when the remote target started
    remote_first_ns: int = 0  # a remote target: its first event (the A2A stream opened) reached the app
    remote_status: int | None = None  # a remote target: the HTTP status its server answered an error with

    @property
    def sent_ns(self) -> int:
        """A remote target: its request left (0: not yet)."""
        return self.sending.sent_ns if self.sending is not None else 0

    def send_from_here(self, url: str, parent: otel_context.Context) -> None:
        """The target is remote: its span starts now (back at the transfer's start), so the request
        this task sends to the target carries it, and the server's spans go under it."""
        self.remote_url = url
        opened = crossing.open_handoff(self.run.telemetry, self.start_ns, parent)
        self.sending = crossing.sending(opened)

    def phases(self, end_ns: int, spoke: bool) -> list[PhaseRecord]:
        """The phases seen, back to back; the one still running at ``end_ns`` is ended with it."""
        phases: list[PhaseRecord] = []
        if self.tool_start_ns:  # text: until the event carrying the transfer reaches the app
            tool_end = self.tool_end_ns if self.run.live else (self.fr_in_ns or self.tool_end_ns)
            phases.append(PhaseRecord(sc.PHASE_TOOL, self.tool_start_ns, tool_end))
        for arrived, released in self.deliveries:
            phases.append(PhaseRecord(sc.PHASE_DELIVERY, arrived, released))
        if self.run.live:
            return phases + self._live_phases(end_ns, spoke)
        switched = self.fr_out_ns or self.tool_end_ns
        if self.remote_url is not None:
            return phases + self._remote_phases(switched, end_ns, spoke)
        if self.model_start_ns:
            phases.append(PhaseRecord(sc.PHASE_SETUP, switched, self.model_start_ns))
            phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, self.model_start_ns, end_ns if spoke else 0))
        elif self.fr_out_ns:
            phases.append(PhaseRecord(sc.PHASE_SETUP, switched, 0))
        return phases

    def _remote_phases(self, switched: int, end_ns: int, spoke: bool) -> list[PhaseRecord]:
        """ADK switching to the remote agent; fetching its card and connecting, until the request
        leaves; the request until its first event (the stream open); then its first content."""
        sent = self.sent_ns
        phases = [PhaseRecord(sc.PHASE_SETUP, switched, self.agent_start_ns)]
        phases.append(PhaseRecord(sc.PHASE_CONNECT, self.agent_start_ns, sent))
        if sent:
            first = self.remote_first_ns if self.remote_first_ns >= sent else 0
            phases.append(PhaseRecord(sc.PHASE_REQUEST, sent, first))
            if first:
                phases.append(PhaseRecord(sc.PHASE_FIRST_OUTPUT, first, end_ns if spoke else 0))
        return phases

    def _live_phases(self, end_ns: int, spoke: bool) -> list[PhaseRecord]:
        """From the tool's end (ADK then sends the function response, stops background tools and
        sleeps) to the old connection's close, then the new connection until its first audio."""
        requested = self.tool_end_ns or self.fr_in_ns
        if not requested:
            return []
        delay = self.run.telemetry.transfer_delay
        attributes = None if delay is None else {sc.TRANSFER_DELAY_CONFIGURED: delay}
        phases = [PhaseRecord(sc.PHASE_TRANSFER_DELAY, requested, self.close_start_ns, attributes)]
        if not self.close_start_ns:
            return phases
        phases.append(PhaseRecord(sc.CLOSE, self.close_start_ns, self.close_end_ns))
        phases.append(PhaseRecord(sc.PHASE_SETUP, self.close_end_ns, self.connect_start_ns))
        if not self.connect_start_ns:
            return phases
        phases.append(PhaseRecord(sc.PHASE_CONNECT, self.connect_start_ns, self.connect_end_ns))
        if self.history_start_ns:
            phases.append(PhaseRecord(sc.PHASE_SEND_HISTORY, self.history_start_ns, self.history_end_ns))
        waiting_from = self.history_end_ns or self.connect_end_ns
        phases.append(PhaseRecord(sc.PHASE_FIRST_AUDIO, waiting_from, end_ns if spoke else 0))
        return phases

    def emit(
        self,
        end_ns: int,
        error: BaseException | str | None = None,
        rejected: str | None = None,
        spoke: bool = False,
    ) -> None:
        """One record: completed when the new agent ``spoke``, else how it ended (``rejected``,
        with or without the ``error`` ADK raised for it, or the run's end)."""
        run = self.run
        if self.model_start_ns:
            run.telemetry.awaiting_output -= 1
        attributes: dict[str, Any] = {}
        if self.sending is not None:
            self.sending.ended = True  # its task's later requests carry their own context
        if self.remote_url is not None:
            attributes[sc.PROTOCOL] = sc.PROTOCOL_A2A
            if self.remote_url:
                attributes[sc.TO_AGENT_REMOTE_URL] = self.remote_url
            if self.remote_status is not None:
                attributes[sc.HTTP_RESPONSE_STATUS_CODE] = self.remote_status
        outcome = sc.OUTCOME_COMPLETED
        if rejected is not None:
            outcome = sc.OUTCOME_REJECTED
            attributes[sc.REJECTION_REASON] = rejected
        elif error is not None:
            outcome = sc.OUTCOME_ERROR
        elif not spoke:
            attributes[sc.ENDED_BY] = sc.ENDED_BY_SESSION_CLOSE if run.live else sc.ENDED_BY_RUN_END
        if run.invocation_id:
            attributes[sc.FRAMEWORK_INVOCATION_ID] = run.invocation_id
        path = sc.PATH_LIVE if run.live else self.path
        if path is not None:
            attributes[sc.FRAMEWORK_PATH] = path
        end_ns = max(end_ns, self.start_ns)
        parent = run._parent_of(self)
        run.conversation.emit(
            start_ns=self.start_ns,
            end_ns=end_ns,
            parent=parent,
            sequence=self.sequence,
            outcome=outcome,
            from_agent=self.from_agent,
            to_agent=self.to_agent,
            trigger=self.trigger,
            tool_name=self.tool_name,
            tool_call_id=self.tool_call_id,
            error=sc.ERROR_CANCELLED if isinstance(error, asyncio.CancelledError) else error,
            attributes=attributes,
            phases=[] if rejected == sc.REJECTED_MULTIPLE else self.phases(end_ns, spoke),
            duration=(end_ns - self.start_ns) / 1e9,
            opened=self.sending.opened if self.sending is not None else None,
        )
