"""A terminal waterfall of ``agent_handoff`` spans: where each handoff spent its time.

One block per handoff: a header (sequence, from → to, trigger, total, outcome), one bar
per phase child on a time axis shared by the handoff's spans (and per phase the framework's own
span stood for, from its seconds on the handoff span), and the reuse flags. Pure
text from finished spans, so the demo, tests and users' scripts can all print it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from ..core import schema as sc

__all__ = ["handoff_phases", "render_handoffs"]

DEFAULT_WIDTH = 40
_PREFIX = sc.SPAN_HANDOFF + "."
_LABEL_WIDTH = 20
_EIGHTHS = " ▏▎▍▌▋▊▉"  # index n: a cell filled n/8 from the left
_FULL = "█"

# order of phases that start at the same instant (an instant phase may have zero length): the registry's
_PHASE_ORDER = {spec.span: rank for rank, spec in enumerate(sc.PHASE_REGISTRY)}

# ANSI colours per phase role, used only when the caller asks for colour
_RESET = "\x1b[0m"
_DIM = "\x1b[2m"
_BOLD = "\x1b[1m"
_RED = "\x1b[31m"
_ROLE_COLOURS = {
    sc.ROLE_WAIT: "\x1b[33m",
    sc.ROLE_WORK: "\x1b[32m",
    sc.ROLE_NESTED: "\x1b[34m",
    sc.ROLE_AFTER: "\x1b[36m",
}
_COLOURS = {spec.span: _ROLE_COLOURS.get(spec.role, "") for spec in sc.PHASE_REGISTRY}


def render_handoffs(
    spans: Iterable[ReadableSpan],
    *,
    width: int = DEFAULT_WIDTH,
    color: bool = False,
    labels: Mapping[str, str] | None = None,
) -> str:
    """Render every finished ``agent_handoff`` span in ``spans`` with its phase children.

    Other spans (the framework's own, for instance) are ignored, so the whole output of an
    exporter can be passed. Handoffs are grouped by conversation (``gen_ai.conversation.id``)
    where they carry one, else by trace, in start order. ``color`` adds
    ANSI colours; leave it off unless writing to a terminal that wants them. ``labels`` names
    a trace's conversation (by its handoffs' ``gen_ai.conversation.id``) in its header.
    """
    finished = [s for s in spans if s.end_time is not None and s.start_time is not None]
    handoffs = sorted((s for s in finished if s.name == sc.SPAN_HANDOFF), key=lambda s: s.start_time or 0)
    if not handoffs:
        return "no agent_handoff spans recorded\n"
    children: dict[tuple[int, int], list[ReadableSpan]] = {}  # every span's, the framework's too
    for span in finished:
        if span.parent is not None:
            children.setdefault((span.context.trace_id, span.parent.span_id), []).append(span)

    # one block per conversation where the spans name it (a framework may trace each turn apart),
    # else per trace
    groups: dict[str, list[ReadableSpan]] = {}
    for handoff in handoffs:
        conversation = _attr(handoff, sc.GEN_AI_CONVERSATION_ID)
        key = f"conversation {conversation}" if conversation else f"trace {handoff.context.trace_id:032x}"
        groups.setdefault(key, []).append(handoff)

    style = _Style(color)
    blocks: list[str] = []
    for key, group in groups.items():
        noun = "handoff" if len(group) == 1 else "handoffs"
        label = (labels or {}).get(_attr(group[0], sc.GEN_AI_CONVERSATION_ID))
        lines = [style.dim(f"{key} · {len(group)} {noun}" + (f" · {label}" if label else ""))]
        headers = [_header_fields(h) for h in group]
        widths = [max(len(f[i]) for f in headers) for i in range(len(headers[0]))]
        for handoff, fields in zip(group, headers, strict=True):
            kids = _phases(handoff, children)
            lines.append("")
            lines.extend(_render_one(handoff, kids, fields, widths, width, style))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


class _Style:
    """ANSI styling that collapses to plain text when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def wrap(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.enabled and code and text else text

    def dim(self, text: str) -> str:
        return self.wrap(_DIM, text)


def handoff_phases(handoff: ReadableSpan, spans: Iterable[ReadableSpan]) -> list[Any]:
    """The phases the waterfall draws for ``handoff``, in start order: its phase child spans,
    and a stand-in (name, times, status, its seconds as attributes) for each phase the
    framework's own span stood for."""
    children: dict[tuple[int, int], list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None and span.end_time is not None:
            children.setdefault((span.context.trace_id, span.parent.span_id), []).append(span)
    found = _phases(handoff, children)
    return sorted(found, key=lambda k: (k.start_time or 0, _PHASE_ORDER.get(k.name, 99)))


class _Phase(NamedTuple):
    """A bar: a phase child of ours, or a phase the framework's own span stood for."""

    name: str
    start_time: int | None
    end_time: int | None
    status: Status
    attributes: Mapping[str, Any] | None


def _phases(handoff: ReadableSpan, children: Mapping[tuple[int, int], list[ReadableSpan]]) -> list[Any]:
    """The handoff's phase children and, for a phase the framework's own span stood for (not sent
    again: ``PhaseSpec.framework_span``), a bar of its seconds on the handoff span, ending where
    that span (under the handoff) ends; without it in ``spans``, right after the phases before it."""
    trace_id = handoff.context.trace_id
    below = children.get((trace_id, handoff.context.span_id), [])
    ours: list[Any] = [k for k in below if k.name.startswith(_PREFIX)]
    missing = [
        spec
        for spec in sc.PHASE_REGISTRY
        if spec.framework_span
        and _attr(handoff, spec.duration_attribute) is not None
        and not any(k.name == spec.span for k in ours)
    ]
    if not missing:
        return ours
    theirs: dict[str, ReadableSpan] = {}  # the framework's spans under the handoff, first of each name
    stack = [k for k in below if not k.name.startswith(_PREFIX)]
    while stack:
        span = stack.pop()
        known = theirs.get(span.name)
        if known is None or (span.start_time or 0) < (known.start_time or 0):
            theirs[span.name] = span
        stack += children.get((trace_id, span.context.span_id), [])
    for spec in missing:
        seconds = _attr(handoff, spec.duration_attribute)
        length = int(seconds * 1e9) if isinstance(seconds, (int, float)) else 0
        found = theirs.get(spec.framework_span or "")
        if found is not None and found.end_time is not None:
            end, status = found.end_time, found.status
        elif length:  # the framework's spans not at hand: after the phases before it
            rank = _PHASE_ORDER[spec.span]
            before = [k.end_time or 0 for k in ours if _PHASE_ORDER.get(k.name, 99) < rank]
            end, status = max(before, default=handoff.start_time or 0) + length, Status()
        else:
            continue  # it did not run (a skipped handoff's start)
        ours.append(_Phase(spec.span, end - length, end, status, {spec.duration_attribute: seconds}))
    return ours


def _attr(span: Any, key: str, default: Any = None) -> Any:
    return (span.attributes or {}).get(key, default)


def _ms(start_ns: int, end_ns: int) -> float:
    return (end_ns - start_ns) / 1e6


def _header_fields(handoff: ReadableSpan) -> tuple[str, str, str, str, str]:
    """(sequence, from → to, trigger, total, outcome) as plain strings, for alignment."""
    sequence = _attr(handoff, sc.SEQUENCE)
    from_agent = _attr(handoff, sc.FROM_AGENT_NAME) or "(none)"
    to_agent = _attr(handoff, sc.TO_AGENT_NAME) or "(none)"
    trigger = str(_attr(handoff, sc.TRIGGER) or _attr(handoff, sc.KIND) or "?")
    tool = _attr(handoff, sc.GEN_AI_TOOL_NAME)
    if tool:
        trigger = f"{trigger}:{tool}"
    total = _ms(handoff.start_time or 0, handoff.end_time or 0)
    outcome = str(_attr(handoff, sc.OUTCOME, "?"))
    reason = _attr(handoff, sc.REJECTION_REASON)
    if outcome == sc.OUTCOME_REJECTED and reason:
        outcome = f"{outcome}: {reason}"  # its status says only "rejected"
    elif handoff.status.status_code is StatusCode.ERROR and handoff.status.description not in (
        None,
        "",
        outcome,
    ):
        outcome = f"{outcome}: {handoff.status.description}"
    return (
        f"#{sequence}" if sequence is not None else "#?",
        f"{from_agent} → {to_agent}",
        trigger,
        f"{total:.2f} ms wall",  # the span, waits and on_enter included (summary: agent_handoff.duration)
        outcome,
    )


def _render_one(
    handoff: ReadableSpan,
    kids: Sequence[Any],
    fields: tuple[str, str, str, str, str],
    widths: Sequence[int],
    width: int,
    style: _Style,
) -> list[str]:
    sequence, agents, trigger, total, outcome = fields
    failed = _attr(handoff, sc.OUTCOME) == sc.OUTCOME_ERROR
    header = "  ".join(
        (
            style.wrap(_BOLD, sequence.ljust(widths[0])),
            style.wrap(_BOLD, agents.ljust(widths[1])),
            trigger.ljust(widths[2]),
            total.rjust(widths[3]),
            style.wrap(_RED if failed else "", outcome),
        )
    )
    lines = [header]

    t0 = handoff.start_time or 0
    t1 = max([handoff.end_time or t0, *(k.end_time or t0 for k in kids)])
    scale = max(t1 - t0, 1)
    indent = " " * (widths[0] + 2)
    ordered = sorted(kids, key=lambda k: (k.start_time or 0, _PHASE_ORDER.get(k.name, 99)))
    for kid in ordered:
        label = kid.name.removeprefix(_PREFIX)
        lock = _attr(kid, sc.LOCK)
        if lock:
            label = f"{label} ({lock})"
        start = ((kid.start_time or t0) - t0) / scale
        end = ((kid.end_time or t0) - t0) / scale
        track = style.wrap(_COLOURS.get(kid.name, ""), bar(start, end, width))
        ms = _ms(kid.start_time or 0, kid.end_time or 0)
        mark = style.wrap(_RED, " !") if kid.status.status_code is StatusCode.ERROR else ""
        lines.append(f"{indent}{label:<{_LABEL_WIDTH}} │{track}│ {ms:8.2f} ms{mark}")
    if ordered:
        axis_end = f"{scale / 1e6:.2f} ms"
        axis = "0".ljust(width - len(axis_end) + 2) + axis_end
        lines.append(style.dim(f"{indent}{'':<{_LABEL_WIDTH}} {axis}"))

    if _attr(handoff, sc.STT_REUSED) is not None:  # a framework that hands resources over
        lines.append(f"{indent}{_reuse_line(handoff)}")
    return lines


def bar(start: float, end: float, width: int) -> str:
    """A ``width``-cell track with a block from ``start`` to ``end`` (fractions of the axis).

    Cells are whole on the left and in eighths on the right; a phase too short to see
    still gets a sliver so it is never silently missing.
    """
    first = min(int(start * width), width - 1)
    end_eighths = round(end * width * 8)
    end_eighths = min(max(end_eighths, first * 8 + 1), width * 8)
    full, part = divmod(end_eighths - first * 8, 8)
    body = _FULL * full + (_EIGHTHS[part] if part else "")
    return (" " * first + body).ljust(width)


def _reuse_line(handoff: ReadableSpan) -> str:
    def flag(key: str, blocked_by: str | None = None) -> str:
        value = _attr(handoff, key)
        if value is None:
            return "?"
        reasons = list(_attr(handoff, blocked_by) or ()) if blocked_by and not value else []
        return ("yes" if value else "no") + (f" ({', '.join(reasons)})" if reasons else "")

    return (
        f"reused: stt {flag(sc.STT_REUSED, sc.STT_REUSE_BLOCKED_BY)}"
        f" · realtime session {flag(sc.REALTIME_SESSION_REUSED, sc.REALTIME_REUSE_BLOCKED_BY)}"
        f" · turn detector {flag(sc.TURN_DETECTOR_REUSED)}"
    )
