"""Where the caller's silence goes, read from one call's trace alone (``docs/livekit.md``).

From the caller's end of speech to hearing the new agent, each segment runs from the end of the one
before to a point of a span: LiveKit 1.8's own (``eou_wait``, ``llm_node``, ``function_tool``,
``tts_node`` and its ``lk.response.ttfb``) and ours (``agent_handoff`` and its phases,
``agent_handoff.first_speech`` and its ``heard_delay``). Only the caller's end is not traced: it
has no spans, so its way to the agent is the downlink's estimate, the path reversed (:data:`UPLINK`).
The test holds the figures to what the caller and the worker measured; :func:`table` prints the
rows the doc shows. ``docs/livekit.md``'s table is the output of one command on one recorded call
(:data:`RECORDING`, written by ``tests/test_livekit_call.py`` with ``OTEL_HANDOFF_UPDATE_DOCS=1``)::

    python tests/livekit_call/waterfall.py tests/livekit_call/recorded-call.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from receivers import Span

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a command: tests/ importable
from livekit_call.deployment import phases_of
from otel_handoff.core import schema as sc

RECORDING = Path(__file__).with_name("recorded-call.json")
COMMAND = "python tests/livekit_call/waterfall.py tests/livekit_call/recorded-call.json"
# what of a call's trace its waterfall reads: these spans, these of their attributes
# (and LiveKit's update_agent family under the handoff, whose spans stand for some of its phases)
_RECORDED_SPANS = (
    "agent_handoff",
    "function_tool",
    "agent_turn",
    "llm_node",
    "eou_wait",
    "tts_node",
    "update_agent",
    *sorted({spec.framework_span for spec in sc.PHASE_REGISTRY if spec.framework_span}),
)
_RECORDED_ATTRIBUTES = (
    "agent_handoff.",
    "gen_ai.agent.name",
    "lk.eou.",
    "lk.response.ttfb",
    "lk.e2e_latency",
)

HANDOFF = "agent_handoff"
FIRST_SPEECH = "agent_handoff.first_speech"
HEARD_DELAY = "agent_handoff.first_speech.heard_delay"
PACKET = "agent_handoff.downlink.packet_duration"
# the caller has no spans: its way to the agent is the downlink's path reversed, less one packet of
# jitter buffer (the caller's buffer meets the new agent's voice as a talk spurt after silence; the
# agent's has settled on a microphone that never stops sending)
UPLINK = "not traced: `heard_delay` less one packet (`agent_handoff.downlink.packet_duration`)"


@dataclass(frozen=True)
class Segment:
    """One row: ``name`` from ``start_us`` to ``end_us``, read from ``source``; a ``part`` lies
    inside the row above it and is not added again."""

    name: str
    source: str
    start_us: float
    end_us: float
    part: bool = False

    @property
    def ms(self) -> float:
        return (self.end_us - self.start_us) / 1000


# the rows' names, in order (the doc's table names the same; parts vary with the handoff)
SEGMENTS = (
    "uplink (estimate)",
    "endpointing",
    "LLM chose the transfer",
    "tool",
    "tool result to handoff",
    "agent_handoff",
    "new agent's LLM",
    "TTS first audio",
    "first frame out",
    "downlink",
)


def end_us(span: Span) -> int:
    return span["start_us"] + span["duration_us"]


def _one(spans: Sequence[Span], what: str, found: list[Span]) -> Span:
    assert found, f"no {what} in the trace (the spans: {sorted({s['name'] for s in spans})})"
    return found[0]


def waterfall(spans: Sequence[Span], handoff: Span) -> list[Segment]:
    """The call's segments around ``handoff`` (a tool's handoff of a LiveKit call)."""
    speech = _one(
        spans,
        "first speech linked to the handoff",
        [s for s in spans if s["name"] == FIRST_SPEECH and handoff["span_id"] in s["links"]],
    )
    # a tool's handoff links the function_tool it came from; the tool ran in the triage's agent_turn
    tool = _one(
        spans,
        "function_tool linked to the handoff",
        [s for s in spans if s["name"] == "function_tool" and s["span_id"] in handoff["links"]],
    )
    turn = _one(spans, "agent_turn the tool ran in", [s for s in spans if s["span_id"] == tool["parent_id"]])
    model = _one(
        spans,
        "llm_node of that turn",
        [s for s in spans if s["parent_id"] == turn["span_id"] and s["name"] == "llm_node"],
    )
    # the user turn's end: LiveKit starts eou_wait at the speech's end the STT (or VAD) reported
    eou = _one(
        spans,
        "committed eou_wait before that turn",
        sorted(
            (
                s
                for s in spans
                if s["name"] == "eou_wait"
                and s["attributes"].get("lk.eou.outcome") == "committed"
                and s["start_us"] <= tool["start_us"]
            ),
            key=lambda s: -s["start_us"],
        ),
    )
    new_agent = handoff["attributes"].get("agent_handoff.to_agent.name")
    reply = _one(
        spans,
        f"{new_agent}'s first agent_turn",
        sorted(
            (
                s
                for s in spans
                if s["name"] == "agent_turn"
                and s["attributes"].get("gen_ai.agent.name") == new_agent
                and s["start_us"] >= handoff["start_us"]
            ),
            key=lambda s: s["start_us"],
        ),
    )
    replied = [s for s in spans if s["parent_id"] == reply["span_id"]]
    reply_model = _one(spans, f"{new_agent}'s llm_node", [s for s in replied if s["name"] == "llm_node"])
    voice = _one(spans, f"{new_agent}'s tts_node", [s for s in replied if s["name"] == "tts_node"])
    ttfb = voice["attributes"].get("lk.response.ttfb")
    heard = speech["attributes"].get(HEARD_DELAY)
    assert ttfb is not None and heard is not None, (voice["attributes"], speech["attributes"])

    packet = speech["attributes"].get(PACKET)
    assert ttfb is not None and heard is not None and packet is not None, (voice, speech)

    spoke_us = eou["start_us"]
    rows = [Segment(SEGMENTS[0], UPLINK, spoke_us - (heard - packet) * 1e6, spoke_us)]
    cursor = spoke_us
    for name, source, until in (
        (
            "endpointing",
            "`eou_wait`: from the end of speech the STT (or VAD) reported to the turn's end",
            end_us(eou),
        ),
        ("LLM chose the transfer", "to the end of that turn's `llm_node`", end_us(model)),
        ("tool", "to the end of `function_tool`", end_us(tool)),
        ("tool result to handoff", "to the start of `agent_handoff`", handoff["start_us"]),
        (HANDOFF, "`agent_handoff`", end_us(handoff)),
        ("new agent's LLM", "to the end of the new agent's `llm_node`", end_us(reply_model)),
        ("TTS first audio", "to `tts_node`'s start + its `lk.response.ttfb`", voice["start_us"] + ttfb * 1e6),
        ("first frame out", "to the end of `agent_handoff.first_speech`", end_us(speech)),
    ):
        end = max(cursor, until)  # what ran before (a preemptive generation) adds nothing
        rows.append(Segment(name, source, cursor, end))
        if name == HANDOFF:
            rows.extend(
                Segment(p["name"].removeprefix(HANDOFF + "."), _source(p), p["start_us"], end_us(p), True)
                for p in phases_of(spans, handoff)
            )
        cursor = end
    rows.append(Segment("downlink", "`agent_handoff.first_speech.heard_delay`", cursor, cursor + heard * 1e6))
    return rows


def _source(phase: Span) -> str:
    """Our span, or (LiveKit 1.8.2+) its seconds on ``agent_handoff``, ending with LiveKit's span."""
    if phase.get("stood_for"):
        return f"`{next(iter(phase['attributes']))}`, ending with LiveKit's `{phase['stood_for']}`"
    return f"`{phase['name']}`"


def table(rows: Sequence[Segment]) -> str:
    """The doc's table: each row's figure and where it ends, from the caller's end of speech."""
    origin = rows[0].start_us
    lines = ["| segment | from the trace | ms | at ms |", "|---|---|--:|--:|"]
    for row in rows:
        name = f"↳ {row.name}" if row.part else row.name
        lines.append(f"| {name} | {row.source} | {row.ms:.1f} | {(row.end_us - origin) / 1000:.1f} |")
    total = rows[-1].end_us - origin
    lines.append(f"| **end of speech → heard** | | **{total / 1000:.1f}** | |")
    return "\n".join(lines)


def recording(call: Any, handoff: Span) -> dict[str, Any]:
    """What one call's waterfall is made of: the spans of its trace it reads (with the attributes
    it reads), which is the handoff, and the caller's end of speech and first hearing of the new
    agent."""
    spans = [
        {
            **span,
            "attributes": {k: v for k, v in span["attributes"].items() if k.startswith(_RECORDED_ATTRIBUTES)},
        }
        for span in call.spans
        if span["name"].startswith(_RECORDED_SPANS)
    ]
    return {
        "spans": spans,
        "handoff": handoff["span_id"],
        "end_of_speech_ns": call.caller["end_of_speech_ns"],
        "first_heard_ns": call.caller["first_heard_ns"]["billing"],
    }


def report(record: dict[str, Any]) -> str:
    """The doc's table and what the caller measured beside it."""
    spans = record["spans"]
    rows = waterfall(spans, next(s for s in spans if s["span_id"] == record["handoff"]))
    measured = (record["first_heard_ns"] - record["end_of_speech_ns"]) / 1e6
    traced = (rows[-1].end_us - rows[0].start_us) / 1000
    side = "under" if traced <= measured else "over"
    return (
        f"{table(rows)}\n\nThe caller measured {measured:.1f} ms from its last voiced sample to the first"
        f" frame of the new agent it received: the trace's figure is {abs(measured - traced):.1f} ms {side}."
    )


if __name__ == "__main__":
    print(report(json.loads(Path(sys.argv[1]).read_text())))
