"""Span parts every framework's instrumentation shares: what it needs, the chat root, errors."""

from __future__ import annotations

import functools
import time
import weakref
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import schema as sc
from .metrics import HandoffMetrics


@dataclass
class HandoffTelemetry:
    """What an instrumentor's wrappers share, built once at ``instrument()``."""

    tracer: trace.Tracer
    metrics: HandoffMetrics
    static_attributes: dict[str, Any]
    enabled: bool = True  # False after uninstrument(): hooks still registered stop recording


def set_error(span: trace.Span, error: BaseException | str) -> None:
    """Error type only: exception messages may quote the conversation, which spans never carry."""
    error_type = error if isinstance(error, str) else type(error).__qualname__
    span.set_attribute(sc.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))


class ChatRoot:
    """The ``agent_handoff.chat`` root of one chat, channel or conversation nobody else traces.

    Started lazily, with the chat's own start time, when its first span needs a parent; so a
    chat without handoffs leaves no span. Once ended, a later span starts a new one. A root whose
    conversation is gone without an end the framework reports (a test double of a worker, an app
    that drops its flow, a span of a conversation that had ended) ends then, at its last handoff;
    ``uninstrument()`` ends what is left.
    """

    __slots__ = (
        "_context",
        "_parent",
        "_span",
        "_start_ns",
        "_static",
        "_tracer",
        "handoffs",
        "last_ns",
        "watch",
    )

    def __init__(
        self,
        tracer: trace.Tracer,
        static_attributes: dict[str, Any],
        start_ns: int,
        parent: otel_context.Context | None,
    ) -> None:
        self._tracer = tracer
        self._static = static_attributes
        self._start_ns = start_ns
        self._parent = parent  # None: the current context; an empty Context: a new trace
        self._span: trace.Span | None = None
        self._context: otel_context.Context | None = None
        self.last_ns = start_ns  # the end of its last handoff: when it ends if nobody says
        self.handoffs = 0  # its conversation's count then
        self.watch: weakref.ref[Any] | None = None  # its conversation, ending it when collected

    def context(self) -> otel_context.Context:
        if self._context is None:
            _OPEN_ROOTS[id(self)] = self
            self._span = self._tracer.start_span(
                sc.SPAN_CHAT,
                context=self._parent,
                kind=SpanKind.INTERNAL,
                attributes={
                    sc.FRAMEWORK: self._static[sc.FRAMEWORK],
                    sc.FRAMEWORK_VERSION: self._static[sc.FRAMEWORK_VERSION],
                },
                start_time=self._start_ns,
            )
            self._context = trace.set_span_in_context(self._span, self._parent)
        return self._context

    def end(self, handoffs: int, end_ns: int, error: BaseException | None = None) -> None:
        span, self._span, self._context = self._span, None, None
        if span is None:
            return
        _OPEN_ROOTS.pop(id(self), None)  # the watch stays: a later span reopens the root
        span.set_attribute(sc.CHAT_HANDOFFS, handoffs)
        if error is not None:
            set_error(span, error)
        span.end(end_time=end_ns)


# the roots started and not ended, by id: uninstrument() ends them; an open root keeps the
# weak reference to its conversation alive, whose callback ends it when the conversation goes
_OPEN_ROOTS: dict[int, ChatRoot] = {}


def end_root_when_gone(conversation: Any, root: ChatRoot) -> None:
    """End ``root`` at its last handoff when ``conversation`` is collected without an end."""
    root.watch = weakref.ref(conversation, functools.partial(_end_gone, root))


def _end_gone(root: ChatRoot, _: weakref.ref[Any]) -> None:
    try:
        root.end(root.handoffs, root.last_ns)
    except Exception as exc:  # at collection: nobody to raise to
        from .faults import report

        report("ending a conversation's root", exc)


def end_open_roots(framework: str) -> None:
    """``uninstrument()``: every root of ``framework`` still open ends now; none stays open."""
    now = time.time_ns()
    for root in list(_OPEN_ROOTS.values()):
        if root._static.get(sc.FRAMEWORK) == framework:
            root.end(root.handoffs, max(now, root.last_ns))
