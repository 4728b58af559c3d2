"""Where the caller's silence goes: one call, from the caller's end of speech to hearing the new node.

Each row runs from the end of the row before to the point named. What a trace of ours shows — the
transition and its phases, the new node's first audio (``first_speech``), the downlink
(``heard_delay``) — comes from the call's trace in Jaeger. The caller's way to the bot and the
STT's endpointing are on no span (the caller has none; the scripted STT, like a provider's
streaming STT, reports no end of speech): they come from the bot's instruments (``measure.py``:
when the caller's voice stopped reaching the STT, when it pushed the transcript), and the docs say
so. The ↳ rows are the transition's phases, inside its row.

``docs/pipecat.md``'s table is the output of one command, from one recorded call (:data:`RECORDING`,
written by ``tests/test_pipecat_call.py`` with ``OTEL_HANDOFF_UPDATE_DOCS=1``)::

    python tests/pipecat_call/waterfall.py tests/pipecat_call/recorded-call.json
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

RECORDING = Path(__file__).with_name("recorded-call.json")
COMMAND = "python tests/pipecat_call/waterfall.py tests/pipecat_call/recorded-call.json"

SEGMENTS = (
    "uplink",
    "endpointing",
    "turn end, model, function call",
    "agent_handoff",
    "new node's model, TTS, first audio",
    "downlink",
)
SOURCES = {
    "uplink": "measured, not traced: the caller's last voiced sample to the STT hearing it stop"
    " (bot's instrument)",
    "endpointing": "not traced: the STT's 300 ms of silence, to its transcript (bot's instrument)",
    "turn end, model, function call": "to the start of `agent_handoff`",
    "agent_handoff": "`agent_handoff`",
    "new node's model, TTS, first audio": "to the end of `agent_handoff.first_speech`",
    "downlink": "`agent_handoff.first_speech.heard_delay`",
}


@dataclass(frozen=True)
class Row:
    name: str
    source: str
    start_us: float
    end_us: float
    part: bool = False  # a phase of the transition, inside its row

    @property
    def ms(self) -> float:
        return max(0.0, self.end_us - self.start_us) / 1000


def waterfall(
    spans: Sequence[Span], handoff: Span, speech: Span, end_of_speech_ns: int, transcribed: dict[str, Any]
) -> list[Row]:
    """The rows of one call: its trace's spans, its transition and first speech, the caller's end
    of speech and the bot's ``transcribed`` record."""
    start, end = handoff["start_us"], handoff["start_us"] + handoff["duration_us"]
    heard = speech["attributes"]["agent_handoff.first_speech.heard_delay"] * 1e6
    first_audio = speech["start_us"] + speech["duration_us"]
    points = [
        end_of_speech_ns / 1000,
        transcribed["quiet_since_ns"] / 1000,
        transcribed["time_ns"] / 1000,
        start,
        end,
        first_audio,
        first_audio + heard,
    ]
    rows = []
    for name, begin, finish in zip(SEGMENTS, points[:-1], points[1:], strict=True):
        rows.append(Row(name, SOURCES[name], begin, finish))
        if name == "agent_handoff":
            phases = sorted(
                (s for s in spans if s["parent_id"] == handoff["span_id"]), key=lambda s: s["start_us"]
            )
            rows += [
                Row(
                    f"↳ {p['name'].removeprefix('agent_handoff.')}",
                    f"`{p['name']}`",
                    p["start_us"],
                    p["start_us"] + p["duration_us"],
                    part=True,
                )
                for p in phases
            ]
            unattributed = handoff["attributes"].get("agent_handoff.unattributed.duration")
            if unattributed is not None:
                rows.append(
                    Row(
                        "↳ unattributed",
                        "`agent_handoff.unattributed.duration`",
                        start,
                        start + unattributed * 1e6,
                        True,
                    )
                )
    return rows


def table(rows: Sequence[Row]) -> str:
    """The rows as the doc's table: segment, source, its ms, and the ms since the end of speech."""
    origin = rows[0].start_us
    lines = ["| segment | from | ms | at ms |", "|---|---|--:|--:|"]
    for row in rows:
        at = "" if row.part else f"{(row.end_us - origin) / 1000:.1f}"
        lines.append(f"| {row.name} | {row.source} | {row.ms:.1f} | {at} |")
    total = (rows[-1].end_us - origin) / 1000
    lines.append(f"| **end of speech → heard** | | **{total:.1f}** | |")
    return "\n".join(lines)


def recording(call: Any, speech: Span, written_ns: int, transcribed: dict[str, Any]) -> dict[str, Any]:
    """What one call's waterfall is made of: its transition, the transition's phases and first
    speech (Jaeger's spans), the caller's end of speech and first hearing of the new node, the
    bot's first write of it and its STT's transcript (the bot's instruments)."""
    handoff = next(s for s in call.spans if s["span_id"] in speech["links"])
    phases = [s for s in call.spans if s["parent_id"] == handoff["span_id"]]
    return {
        "handoff": handoff,
        "phases": phases,
        "first_speech": speech,
        "end_of_speech_ns": call.caller["end_of_speech_ns"],
        "first_heard_ns": call.caller["first_heard_ns"]["billing"],
        "written_ns": written_ns,
        "transcribed": transcribed,
    }


def waterfall_of(record: dict[str, Any]) -> list[Row]:
    return waterfall(
        record["phases"],
        record["handoff"],
        record["first_speech"],
        record["end_of_speech_ns"],
        record["transcribed"],
    )


def report(record: dict[str, Any]) -> str:
    """The doc's table and what the caller measured beside it."""
    rows = waterfall_of(record)
    measured = (record["first_heard_ns"] - record["end_of_speech_ns"]) / 1e6
    traced = (rows[-1].end_us - rows[0].start_us) / 1000
    side = "under" if traced <= measured else "over"
    return (
        f"{table(rows)}\n\nThe browser played the new node's first audio {measured:.1f} ms after the caller's"
        f" last voiced sample: the table is {abs(measured - traced):.1f} ms {side}."
    )


if __name__ == "__main__":
    print(report(json.loads(Path(sys.argv[1]).read_text())))
