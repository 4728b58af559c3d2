"""Span parts every framework's instrumentation shares: what it needs, the chat root, errors."""

from __future__ import annotations

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
    chat without handoffs leaves no span. Once ended, a later span starts a new one.
    """

    __slots__ = ("_context", "_parent", "_span", "_start_ns", "_static", "_tracer")

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

    def context(self) -> otel_context.Context:
        if self._context is None:
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
        span.set_attribute(sc.CHAT_HANDOFFS, handoffs)
        if error is not None:
            set_error(span, error)
        span.end(end_time=end_ns)
