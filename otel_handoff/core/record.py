"""The one handoff model: what a framework package observes, as plain data.

A framework package fills a :class:`HandoffRecord` while (or after) a handoff runs, with real
start and end times, and hands it to :func:`otel_handoff.core.emit.emit` (or its conversation's
:meth:`~otel_handoff.core.conversation.Conversation.emit`), which makes every span and metric
of it. Nothing here touches OpenTelemetry's current context, so a record can be filled
anywhere in the framework's code without the app seeing it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Link

if TYPE_CHECKING:
    from .crossing import OpenHandoff

# what a record keeps of a cancellation: an instance never raised, so it holds no traceback
CANCELLED = asyncio.CancelledError()


def kept_error(error: BaseException | str | None) -> BaseException | str | None:
    """What a record that may outlive the moment keeps of an error: its type's name (all a span
    shows), or :data:`CANCELLED`. Never the exception itself: its traceback holds every frame it
    passed through, and the sessions and agents in them, for as long as the record lives."""
    if error is None or isinstance(error, str):
        return error
    if isinstance(error, asyncio.CancelledError):
        return CANCELLED
    return type(error).__qualname__


@dataclass(slots=True)
class PhaseRecord:
    """One phase of a handoff (a name of ``schema.PHASES``), with its real times."""

    name: str
    start_ns: int
    end_ns: int = 0  # 0: still running when the handoff ended (it is ended with the handoff)
    attributes: dict[str, Any] | None = None
    error: BaseException | str | None = None  # an exception, or an error type such as "timeout"
    own_ns: int | None = None  # its own time, when a phase nested in it is counted on its own


@dataclass(slots=True)
class HandoffRecord:
    """One finished handoff: who, why, how it ended, and its phases."""

    start_ns: int
    end_ns: int
    sequence: int
    outcome: str
    parent: otel_context.Context | None  # None: the current context
    from_agent: str | None = None
    from_agent_id: str | None = None
    to_agent: str | None = None
    to_agent_id: str | None = None
    trigger: str | None = None  # how it was asked for (LiveKit, Pipecat)
    kind: str | None = None  # which mechanism decided it (AG2)
    tool_name: str | None = None
    tool_call_id: str | None = None
    conversation_id: str | None = None  # only a value the framework or the app gave
    links: list[Link] | None = None
    error: BaseException | str | None = None  # status ERROR with error.type
    attributes: dict[str, Any] = field(default_factory=dict)  # the framework's own attributes
    phases: list[PhaseRecord] = field(default_factory=list)
    # seconds for agent_handoff.duration; None: the sum of the phases whose role is "work"
    duration: float | None = None
    # phases that run side by side (a realtime handoff's session update within the old response's
    # drain): what they leave uncovered is found from their union, not from the span less their sum
    phases_overlap: bool = False
    # its agent_handoff span, started when the handoff began (core.crossing.open_handoff): emit
    # ends that span instead of making one, so a request or a framework's spans could carry it
    opened: OpenHandoff | None = None
    # the framework's own spans of its phases (``PhaseSpec.framework_span``) are under that span, on
    # the same provider: those phases are not sent again as spans, their seconds go on agent_handoff
    framework_spans: bool = False
