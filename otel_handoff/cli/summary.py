"""``otel-handoff summary``: how handoffs did across many calls, from spans already exported.

Reads ``agent_handoff`` spans (and their phase children and linked spans) from a file or a
backend (see :mod:`otel_handoff.cli.span_sources`), groups them by framework and from → to
agent pair, and reports per pair: count, outcomes, reuse rates and p50 / p95 / max / mean of
the handoff duration and of each phase.

Percentiles are **nearest-rank**: the p-th percentile of n values is the ⌈p·n/100⌉-th smallest,
always a value that was observed (so p50 ≤ p95 ≤ max, and one handoff gives one number).

Phases, every framework's, come from the phase registry (``schema.PHASE_REGISTRY``): the
handoff span's duration attributes, its child spans' (``on_enter``, ``realtime_update``; an
``on_enter`` that LiveKit's own span stood for, the handoff span's) or its linked spans'
(``first_speech``, ``reconnect``). Phoenix keeps no links: there, a ``first_speech`` span is
matched to the handoff with the same parent that started at the same microsecond (it starts
when the handoff is requested). As in the ``agent_handoff.phase.duration`` metric, queue and lock
waits count only the handoffs that waited (the span says 0 for the others): their ``n`` is how
many handoffs waited.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import schema as sc
from ..core.frameworks import BY_SPAN_FRAMEWORK
from ..export.credentials import redact
from .span_sources import SpanRecord, SpanSourceError, read_spans
from .waterfall import bar

__all__ = [
    "PHASE_NAMES",
    "HandoffRecord",
    "PairSummary",
    "Stats",
    "collect_handoffs",
    "percentile",
    "render_chart",
    "render_csv",
    "render_json",
    "render_table",
    "summarize",
]

# every phase of every framework, in the order a handoff goes through them (the one registry)
PHASE_NAMES = tuple(spec.name for spec in sc.PHASE_REGISTRY)
# the agent names as otel-handoff 0.1 wrote them, so its exports still read
_LEGACY_NAMES = {sc.FROM_AGENT_NAME: "gen_ai.handoff.from_agent", sc.TO_AGENT_NAME: "gen_ai.handoff.to_agent"}
REUSE_FLAGS = {
    "stt": sc.STT_REUSED,
    "realtime_session": sc.REALTIME_SESSION_REUSED,
    "turn_detector": sc.TURN_DETECTOR_REUSED,
}
OUTCOMES = (sc.OUTCOME_COMPLETED, sc.OUTCOME_ERROR, sc.OUTCOME_REJECTED, sc.OUTCOME_SKIPPED)
NONE_AGENT = "(none)"  # an AG2 handoff that ended the chat has no target agent
NO_REASON = "(no reason)"  # a rejected span without agent_handoff.rejection_reason
CHART_WIDTH = 40
_LINKED_START_TOLERANCE_NS = 1_000  # backends round times to the microsecond


class SummaryError(Exception):
    """A handoff span whose attributes do not follow the schema: a one-line reason."""


# --- one handoff ------------------------------------------------------------------------------
@dataclass(frozen=True)
class HandoffRecord:
    """What the summary needs of one ``agent_handoff`` span. Times are in seconds."""

    framework: str
    from_agent: str
    to_agent: str
    via: str  # agent_handoff.trigger (LiveKit) or agent_handoff.kind (AG2)
    outcome: str
    duration: float | None
    phases: Mapping[str, float] = field(default_factory=dict)
    reuse: Mapping[str, bool] = field(default_factory=dict)
    # after first speech, until the caller hears it: the estimate on the first_speech span, if any
    heard_delay: float | None = None
    rejection_reason: str | None = None  # a rejected handoff's agent_handoff.rejection_reason

    @property
    def pair(self) -> tuple[str, str, str]:
        return (self.framework, self.from_agent, self.to_agent)


def collect_handoffs(spans: Iterable[SpanRecord]) -> list[HandoffRecord]:
    """Every ``agent_handoff`` span in ``spans`` with the time of each of its phases.

    Where a phase's time is comes from the phase registry: an attribute of the handoff span
    (work and waits; a wait counts only when it happened), its child spans (``on_enter``,
    ``realtime_update``) or the spans linked to it (``first_speech``, ``reconnect``). A span
    seen twice (overlapping queries, an exporter's retry) counts once.
    """
    spans = list({(s.trace_id, s.span_id): s for s in spans}.values())
    handoffs = [s for s in spans if s.name == sc.SPAN_HANDOFF]
    # (trace id, handoff span id) -> phase -> the related spans
    related: dict[tuple[str, str], dict[str, list[SpanRecord]]] = {}
    unlinked_speech: list[SpanRecord] = []
    for span in spans:
        spec = sc.PHASES_BY_SPAN.get(span.name)
        if spec is None or spec.on_handoff_span:
            continue
        if spec.role != sc.ROLE_LINKED:
            # a child, or (an on_enter that outlasted its handoff) beside it and linked
            for handoff_id in span.links or (span.parent_id,):
                if handoff_id:
                    related.setdefault((span.trace_id, handoff_id), {}).setdefault(spec.name, []).append(span)
        elif span.links:
            for link in span.links:
                related.setdefault((span.trace_id, link), {}).setdefault(spec.name, []).append(span)
        elif spec.name == sc.PHASE_FIRST_SPEECH:
            unlinked_speech.append(span)
    for speech in unlinked_speech:
        handoff = _same_request(speech, handoffs)
        if handoff is not None:
            by_phase = related.setdefault((handoff.trace_id, handoff.span_id), {})
            by_phase.setdefault(sc.PHASE_FIRST_SPEECH, []).append(speech)

    result = []
    for span in sorted(handoffs, key=lambda s: (s.start_ns or 0, s.span_id)):
        attributes = span.attributes
        around = related.get((span.trace_id, span.span_id), {})
        phases: dict[str, float] = {}
        for spec in sc.PHASE_REGISTRY:
            if spec.on_handoff_span:
                if attributes.get(spec.duration_attribute) is None:
                    continue
                seconds = _seconds(span, spec.duration_attribute)
                if seconds > 0 or spec.role != sc.ROLE_WAIT:
                    phases[spec.name] = seconds
            elif spec.name in around:
                times = [_span_seconds(s, spec.duration_attribute) for s in around[spec.name]]
                if any(t is not None for t in times):
                    phases[spec.name] = sum(t for t in times if t is not None)
            elif spec.framework_span and attributes.get(spec.duration_attribute) is not None:
                # the framework's own span stood for it: its seconds are on the handoff span
                phases[spec.name] = _seconds(span, spec.duration_attribute)
        outcome = attributes.get(sc.OUTCOME)
        if outcome is None:
            outcome = sc.OUTCOME_ERROR if span.status == "ERROR" else "unknown"
        reason = attributes.get(sc.REJECTION_REASON)
        if outcome == sc.OUTCOME_REJECTED and not reason:
            reason = NO_REASON
        result.append(
            HandoffRecord(
                framework=str(attributes.get(sc.FRAMEWORK) or "unknown"),
                from_agent=_agent(attributes, sc.FROM_AGENT_NAME),
                to_agent=_agent(attributes, sc.TO_AGENT_NAME),
                via=str(attributes.get(sc.TRIGGER) or attributes.get(sc.KIND) or "?"),
                outcome=str(outcome),
                duration=_span_seconds(span, sc.DURATION),
                phases=phases,
                reuse={
                    name: _flag(span, attribute)
                    for name, attribute in REUSE_FLAGS.items()
                    if attributes.get(attribute) is not None
                },
                heard_delay=next(
                    (
                        heard
                        for speech in around.get(sc.PHASE_FIRST_SPEECH, ())
                        if speech.attributes.get(sc.FIRST_SPEECH_HEARD_DELAY) is not None
                        and (heard := _seconds(speech, sc.FIRST_SPEECH_HEARD_DELAY)) is not None
                    ),
                    None,
                ),
                rejection_reason=str(reason) if outcome == sc.OUTCOME_REJECTED else None,
            )
        )
    return result


def _agent(attributes: Mapping[str, Any], key: str) -> str:
    return str(attributes.get(key) or attributes.get(_LEGACY_NAMES[key]) or NONE_AGENT)


def _same_request(speech: SpanRecord, handoffs: Sequence[SpanRecord]) -> SpanRecord | None:
    """The handoff a link-less first_speech span belongs to: same parent, same start."""
    if speech.start_ns is None:
        return None
    for handoff in handoffs:
        if (
            handoff.trace_id == speech.trace_id
            and handoff.parent_id == speech.parent_id
            and handoff.start_ns is not None
            and abs(handoff.start_ns - speech.start_ns) <= _LINKED_START_TOLERANCE_NS
        ):
            return handoff
    return None


def _seconds(span: SpanRecord, attribute: str) -> float:
    value = span.attributes.get(attribute)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _bad(span, attribute, "a number of seconds", value)
    try:
        seconds = float(value)  # Jaeger and others may keep numbers as strings
    except ValueError:
        raise _bad(span, attribute, "a number of seconds", value) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise _bad(span, attribute, "a non-negative number of seconds", value)
    return seconds


def _span_seconds(span: SpanRecord, attribute: str) -> float | None:
    """The span's duration attribute, else its own end - start; None when it has neither."""
    if span.attributes.get(attribute) is not None:
        return _seconds(span, attribute)
    if span.start_ns is not None and span.end_ns is not None:
        return max(0, span.end_ns - span.start_ns) / 1e9
    return None


def _flag(span: SpanRecord, attribute: str) -> bool:
    value = span.attributes[attribute]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise _bad(span, attribute, "a boolean", value)


def _bad(span: SpanRecord, attribute: str, wanted: str, value: Any) -> SummaryError:
    span_id = span.span_id or "(no span id)"
    return SummaryError(f"span {span_id} ({span.name}): {attribute}: expected {wanted}, got {value!r}")


# --- statistics -----------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (non-empty): the ⌈p·n/100⌉-th smallest."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Stats:
    """Count, nearest-rank p50 and p95, max and mean of some durations (seconds)."""

    count: int
    p50: float
    p95: float
    max: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats | None:
        if not values:
            return None
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 95),
            max(values),
            math.fsum(values) / len(values),
        )


@dataclass(frozen=True)
class PairSummary:
    """The handoffs of one framework's from → to agent pair."""

    framework: str
    from_agent: str
    to_agent: str
    count: int
    via: Mapping[str, int]
    outcomes: Mapping[str, int]
    duration: Stats | None
    phases: Mapping[str, Stats]
    reuse: Mapping[str, tuple[int, int]]  # flag -> (reused, handoffs that report it)
    heard: Stats | None = None  # first speech to the caller's ear, estimated (LiveKit in a room)
    rejections: Mapping[str, int] = field(default_factory=dict)  # rejection reason -> handoffs

    @property
    def label(self) -> str:
        return f"{self.from_agent} → {self.to_agent}"


def summarize(handoffs: Iterable[HandoffRecord]) -> list[PairSummary]:
    """One :class:`PairSummary` per framework and from → to pair, sorted by those names."""
    groups: dict[tuple[str, str, str], list[HandoffRecord]] = {}
    for handoff in handoffs:
        groups.setdefault(handoff.pair, []).append(handoff)
    pairs = []
    for (framework, from_agent, to_agent), group in sorted(groups.items()):
        phases = {
            phase: stats
            for phase in PHASE_NAMES
            if (stats := Stats.of([h.phases[phase] for h in group if phase in h.phases])) is not None
        }
        reuse = {}
        for flag in REUSE_FLAGS:
            reported = [h.reuse[flag] for h in group if flag in h.reuse]
            if reported:
                reuse[flag] = (sum(reported), len(reported))
        outcomes = Counter(h.outcome for h in group)
        pairs.append(
            PairSummary(
                framework=framework,
                from_agent=from_agent,
                to_agent=to_agent,
                count=len(group),
                via=dict(sorted(Counter(h.via for h in group).items())),
                outcomes={**{o: outcomes.get(o, 0) for o in OUTCOMES}, **outcomes},
                duration=Stats.of([h.duration for h in group if h.duration is not None]),
                phases=phases,
                reuse=reuse,
                heard=Stats.of([h.heard_delay for h in group if h.heard_delay is not None]),
                rejections=dict(
                    sorted(Counter(h.rejection_reason for h in group if h.rejection_reason).items())
                ),
            )
        )
    return pairs


# --- rendering for people -------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.2f}"


def _rate(reuse: tuple[int, int] | None) -> str:
    if reuse is None:
        return "—"
    reused, total = reuse
    return f"{100 * reused / total:.0f}%"


def _counted(counts: Mapping[str, int], total: int) -> str:
    """Names with their counts, a count only where it is not the whole (n or rej says it)."""
    if len(counts) == 1 and next(iter(counts.values())) == total:
        return next(iter(counts))
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())


def _via(pair: PairSummary) -> str:
    """How the pair's handoffs came about; counts only when there is more than one way (n says it)."""
    return _counted(pair.via, pair.count)


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Rows aligned under ``header``; columns in ``right`` are right-aligned (numbers)."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]


# the handoff time both here and in the overview's p50/p95/max: the span's `agent_handoff.duration`
DURATION_LABEL = "duration"
# after first_speech: estimated from the agent's WebRTC statistics (agent_handoff.first_speech.heard_delay)
HEARD_LABEL = "heard (est.)"


def duration_legend(frameworks: Sequence[str]) -> str:
    """What ``duration`` is for each framework in the data (the framework registry says)."""
    meanings = [
        f"{key}: {BY_SPAN_FRAMEWORK[key].duration}" if key in BY_SPAN_FRAMEWORK else key
        for key in sorted(set(frameworks))
    ]
    return (
        f"duration = agent_handoff.duration ({'; '.join(meanings)});"
        " the demo's waterfall shows each span's wall time"
    )


_REUSE_LABELS = {"stt": "stt", "realtime_session": "realtime", "turn_detector": "turn"}
_NUMERIC = {"n", "p50", "p95", "max", "err", "rej", "skip", *_REUSE_LABELS.values()}


def table_columns(pairs: Sequence[PairSummary]) -> list[tuple[str, Callable[[PairSummary], str]]]:
    """(label, cell) of the table's columns: those of what the input holds. Rejections and skips
    where any handoff had one (with the reasons), a reuse rate where any handoff reports the flag
    (LiveKit's), so a LlamaIndex file gets no LiveKit columns."""

    def duration(stat: str) -> Callable[[PairSummary], str]:
        return lambda p: _ms(getattr(p.duration, stat) if p.duration else None)

    def outcome(name: str) -> Callable[[PairSummary], str]:
        return lambda p: str(p.outcomes.get(name, 0))

    def reuse(flag: str) -> Callable[[PairSummary], str]:
        return lambda p: _rate(p.reuse.get(flag))

    columns: list[tuple[str, Callable[[PairSummary], str]]] = [
        ("framework", lambda p: p.framework),
        ("from → to", lambda p: p.label),
        ("via", _via),
        ("n", lambda p: str(p.count)),
        *((stat, duration(stat)) for stat in ("p50", "p95", "max")),
        ("err", outcome(sc.OUTCOME_ERROR)),
    ]
    if any(p.outcomes.get(sc.OUTCOME_REJECTED) for p in pairs):
        columns.append(("rej", outcome(sc.OUTCOME_REJECTED)))
        columns.append(
            ("rejected as", lambda p: _counted(p.rejections, p.outcomes.get(sc.OUTCOME_REJECTED, 0)))
        )
    if any(p.outcomes.get(sc.OUTCOME_SKIPPED) for p in pairs):
        columns.append(("skip", outcome(sc.OUTCOME_SKIPPED)))
    columns += [
        (label, reuse(flag)) for flag, label in _REUSE_LABELS.items() if any(flag in p.reuse for p in pairs)
    ]
    return columns


def _legend(header: Sequence[str]) -> str:
    outcomes = [name for name in ("err", "rej", "skip") if name in header]
    words = {"err": "error", "rej": "rejected", "skip": "skipped"}
    parts = [f"{'/'.join(outcomes)}: outcome {', '.join(words[name] for name in outcomes)}"]
    if "rej" in header:
        parts.append("rejected as: agent_handoff.rejection_reason")
    reused = [label for label in _REUSE_LABELS.values() if label in header]
    if reused:
        parts.append(f"{'/'.join(reused)}: share of handoffs that reused it")
    return " · ".join(parts)


def render_table(pairs: Sequence[PairSummary], source: str = "") -> str:
    """An overview line per pair, then each pair's phase table (milliseconds)."""
    total = sum(p.count for p in pairs)
    noun = "handoff" if total == 1 else "handoffs"
    where = f" in {source}" if source else ""
    pair_noun = "agent pair" if len(pairs) == 1 else "agent pairs"
    lines = [
        f"{total} {noun}, {len(pairs)} {pair_noun}{where} · percentiles nearest-rank · times in ms",
        duration_legend([p.framework for p in pairs]),
        "",
    ]
    columns = table_columns(pairs)
    header = [label for label, _ in columns]
    rows = [[cell(pair) for _, cell in columns] for pair in pairs]
    lines += _columns(header, rows, right={i for i, (label, _) in enumerate(columns) if label in _NUMERIC})
    lines.append(_legend(header))

    for pair in pairs:
        lines += [
            "",
            f"{pair.label}  ({pair.framework}, {pair.count} {'handoff' if pair.count == 1 else 'handoffs'})",
        ]
        stats = [(DURATION_LABEL, pair.duration), *pair.phases.items(), (HEARD_LABEL, pair.heard)]
        rows = [
            [name, str(s.count), _ms(s.p50), _ms(s.p95), _ms(s.max), _ms(s.mean)]
            for name, s in stats
            if s is not None
        ]
        lines += [
            "  " + row
            for row in _columns(["phase", "n", "p50", "p95", "max", "mean"], rows, right={1, 2, 3, 4, 5})
        ]
    return "\n".join(lines) + "\n"


def render_chart(pairs: Sequence[PairSummary], width: int = CHART_WIDTH) -> str:
    """Bars of the mean time of each phase, per pair, on one scale across all pairs (ms)."""
    means = [s.mean for p in pairs for s in p.phases.values()]
    scale = max(means, default=0.0)
    label_width = max((len(name) for name in PHASE_NAMES), default=0)
    lines = [
        f"mean phase time per pair in ms (a full bar is {_ms(scale)} ms;"
        " each phase averaged over the handoffs that had it)"
    ]
    for pair in pairs:
        lines += ["", f"{pair.label}  ({pair.framework})"]
        if not pair.phases:
            lines.append("  (no phases recorded: AG2 handoffs are one step)")
        for name, stats in pair.phases.items():
            bar = _bar(stats.mean / scale if scale else 0.0, width)
            lines.append(f"  {name:<{label_width}} │{bar}│ {_ms(stats.mean):>8}")
    return "\n".join(lines) + "\n"


def _bar(fraction: float, width: int) -> str:
    """A bar from the left (the waterfall's bars, one drawing); zero draws nothing."""
    return bar(0.0, min(fraction, 1.0), width) if fraction > 0 else " " * width


# --- rendering for machines -----------------------------------------------------------------------
def _stats_dict(stats: Stats | None) -> dict[str, float | int] | None:
    if stats is None:
        return None
    return {"count": stats.count, "p50": stats.p50, "p95": stats.p95, "max": stats.max, "mean": stats.mean}


def render_json(pairs: Sequence[PairSummary], source: str = "") -> str:
    """The summary as one JSON document; durations in seconds."""
    document = {
        "source": source,
        "handoffs": sum(p.count for p in pairs),
        "unit": "s",
        "percentiles": "nearest-rank",
        "pairs": [
            {
                "framework": p.framework,
                "from_agent": p.from_agent,
                "to_agent": p.to_agent,
                "count": p.count,
                "via": dict(p.via),
                "outcomes": dict(p.outcomes),
                "duration": _stats_dict(p.duration),
                "phases": {name: _stats_dict(s) for name, s in p.phases.items()},
                "heard_delay": _stats_dict(p.heard),
                "rejection_reasons": dict(p.rejections),
                "reuse": {
                    flag: {"reused": reused, "of": total, "rate": reused / total}
                    for flag, (reused, total) in p.reuse.items()
                },
            }
            for p in pairs
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


_STAT_FIELDS = ("count", "p50", "p95", "max", "mean")


def csv_header(pairs: Sequence[PairSummary]) -> list[str]:
    """The CSV columns: those of what the input holds (phases, reuse flags, the heard delay where
    any pair has them), in the registry's order; outcomes always."""
    phases = _csv_phases(pairs)
    heard = ["heard_delay"] if any(p.heard for p in pairs) else []
    return [
        "framework",
        "from_agent",
        "to_agent",
        "count",
        "via",
        *OUTCOMES,
        "rejection_reasons",
        *(f"{flag}_reuse_rate" for flag in REUSE_FLAGS if any(flag in p.reuse for p in pairs)),
        *(
            f"{name}_{f}" + ("" if f == "count" else "_s")
            for name in ("duration", *phases, *heard)
            for f in _STAT_FIELDS
        ),
    ]


def _csv_phases(pairs: Sequence[PairSummary]) -> list[str]:
    return [phase for phase in PHASE_NAMES if any(phase in p.phases for p in pairs)]


def render_csv(pairs: Sequence[PairSummary]) -> str:
    """One row per pair, durations in seconds; empty cells where a pair lacks a phase or flag."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(csv_header(pairs))
    phases = _csv_phases(pairs)
    flags = [flag for flag in REUSE_FLAGS if any(flag in p.reuse for p in pairs)]
    heard = any(p.heard for p in pairs)
    for p in pairs:
        row: list[Any] = [
            p.framework,
            p.from_agent,
            p.to_agent,
            p.count,
            " ".join(f"{k}:{n}" for k, n in p.via.items()),
        ]
        row += [p.outcomes.get(outcome, 0) for outcome in OUTCOMES]
        row.append(" ".join(f"{reason}:{n}" for reason, n in p.rejections.items()))
        row += [(r[0] / r[1]) if (r := p.reuse.get(flag)) else "" for flag in flags]
        for stats in (p.duration, *(p.phases.get(phase) for phase in phases), *([p.heard] if heard else [])):
            row += [getattr(stats, f) if stats else "" for f in _STAT_FIELDS]
        writer.writerow(row)
    return out.getvalue()


# --- the command ----------------------------------------------------------------------------------
FORMATS = ("table", "json", "csv")


def run(
    source: str,
    *,
    output_format: str = "table",
    chart_only: bool = False,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, str, str]:
    """Summarize ``source``: (exit code, standard output, one-line error or note for stderr).

    ``headers`` go with every request to a backend's URL (credentials). Exit codes: 0 printed a
    summary, 1 no handoff spans, 2 the source is unreadable or malformed.
    """
    notes: list[str] = []
    shown = redact(source)  # a URL's credentials never reach the output
    try:
        spans = read_spans(source, notes, headers)
        handoffs = collect_handoffs(spans)
    except (SpanSourceError, SummaryError) as exc:
        return 2, "", f"otel-handoff summary: {shown}: {redact(str(exc))}"
    source = shown
    repeats = len(spans) - len({(s.trace_id, s.span_id) for s in spans})
    if repeats:
        notes.append(f"{repeats} repeated span(s) (same trace and span id) counted once")
    message = "\n".join(f"otel-handoff summary: {source}: {note}" for note in notes)
    if not handoffs:
        what = f"{len(spans)} spans, none named {sc.SPAN_HANDOFF}" if spans else "no spans"
        return (
            1,
            "",
            "\n".join(filter(None, (message, f"otel-handoff summary: {source}: no handoff spans ({what})"))),
        )
    pairs = summarize(handoffs)
    if output_format == "json":
        return 0, render_json(pairs, source), message
    if output_format == "csv":
        return 0, render_csv(pairs), message
    if chart_only:
        return 0, render_chart(pairs), message
    return 0, render_table(pairs, source) + "\n" + render_chart(pairs), message
