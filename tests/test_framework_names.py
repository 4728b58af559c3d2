"""Every text a user reads that speaks of the frameworks names every framework of the registry
(``otel_handoff/core/frameworks.py``): the command line's help, ``doctor``, the README, ``docs/``,
the package's description. A framework added to the registry fails here until each names it.

Generated texts take the names from the registry; prose is searched: a sentence, bullet, table row
or table that names three frameworks or more is a list of them, and must name all, or be one of
``PARTIAL`` below, which says which frameworks it leaves out and why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import otel_handoff
from otel_handoff.cli import _DEMOS
from otel_handoff.core.frameworks import FRAMEWORKS, Framework, any_hint, names

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    path.relative_to(ROOT).as_posix(): path for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
}
KEYS = frozenset(framework.key for framework in FRAMEWORKS)
# names a text uses for a framework beyond those the registry holds
ALSO_CALLED = {"google-adk": ("ADK",)}
LIST = 3  # a text naming this many frameworks or more lists them
# lists that leave frameworks out on purpose: (page, words of the list, the keys it leaves out, why)
PARTIAL: list[tuple[str, str, frozenset[str], str]] = [
    (
        "docs/overhead.md",
        "`python bench/frameworks_overhead.py` counts",
        frozenset({"livekit"}),
        "LiveKit's bench is the bullet before (bench/handoff_overhead.py)",
    ),
    (
        "docs/overhead.md",
        "| framework, scenario | spans per handoff |",
        frozenset({"livekit"}),
        "LiveKit's row is the table before it, from its own bench",
    ),
    (
        "docs/overhead.md",
        "What changed: Pipecat's first speech",
        frozenset({"openai-agents", "google-adk", "strands", "agent-framework"}),
        "what the overhead work changed, framework by framework: nothing of these frameworks' own",
    ),
    (
        "docs/metrics.md",
        "Frameworks whose handoff tool itself refuses the target",
        frozenset({"ag2", "agent-framework", "langgraph", "livekit", "openai-agents", "pipecat"}),
        "the frameworks that make a refused target a rejected span (the one that counts it instead "
        "is the sentence before)",
    ),
]


def spoken(text: str) -> str:
    """Lower case, with ``-`` and ``_`` as spaces: ``google_adk_handoff`` names Google ADK."""
    return re.sub(r"[-_]", " ", text.lower())


def _patterns(framework: Framework) -> list[re.Pattern[str]]:
    called = {
        framework.key,
        framework.extra,
        framework.name,
        framework.span_framework,
        *framework.distributions,
        *ALSO_CALLED.get(framework.key, ()),
    }
    return [re.compile(rf"(?<!\w){re.escape(spoken(name))}(?!\w)") for name in called]


PATTERNS = {framework.key: _patterns(framework) for framework in FRAMEWORKS}


def named(text: str) -> frozenset[str]:
    """The keys of the frameworks ``text`` names."""
    text = spoken(text)
    return frozenset(key for key, patterns in PATTERNS.items() if any(p.search(text) for p in patterns))


def sentences(prose: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z`(\[*\"])", " ".join(prose.split()))


def units(markdown: str) -> list[str]:
    """A page's sentences (in paragraphs and bullets), each table row and table, each code line."""
    found: list[str] = []
    paragraph: list[str] = []
    table: list[str] = []
    in_code = False

    def flush() -> None:
        if paragraph:
            found.extend(sentences(" ".join(paragraph)))
            paragraph.clear()
        if table:
            found.extend([*table, "\n".join(table)])
            table.clear()

    for line in markdown.splitlines():
        if line.startswith("```"):
            flush()
            in_code = not in_code
        elif in_code:
            found.append(line)
        elif line.startswith("|"):
            if paragraph:
                flush()
            table.append(line)
        elif not line.strip() or line.startswith(("#", "<!--", "- ")):
            flush()
            if line.startswith("- "):
                paragraph.append(line[2:])
        else:
            if table:
                flush()
            paragraph.append(line)
    flush()
    return found


def _help(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"COLUMNS": "100"}
    result = subprocess.run(
        [sys.executable, "-m", "otel_handoff", *args, "--help"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


def texts() -> dict[str, str]:
    """Every text a user reads that may speak of the frameworks, by where it is."""
    description = re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert description is not None
    return {
        **{page: path.read_text(encoding="utf-8") for page, path in sorted(PAGES.items())},
        "pyproject.toml description": description.group(1),
        "otel_handoff's docstring": otel_handoff.__doc__ or "",
        "otel-handoff --help": _help(),
        "otel-handoff demo --help": _help("demo"),
        "otel-handoff summary --help": _help("summary"),
        "otel-handoff doctor --help": _help("doctor"),
        "the hint when no framework is installed": any_hint(),
    }


TEXTS = texts()


# --- generated from the registry ---------------------------------------------------------------
def test_the_help_of_the_command_and_of_demo_names_every_framework() -> None:
    for text in (TEXTS["otel-handoff --help"], TEXTS["otel-handoff demo --help"]):
        assert names() in text
    for framework in FRAMEWORKS:
        pattern = rf"\b{framework.key}( \(default\))?: "
        assert re.search(pattern, TEXTS["otel-handoff demo --help"]), framework.key


def test_every_framework_has_a_demo() -> None:
    assert list(_DEMOS) == [framework.key for framework in FRAMEWORKS]
    for module, function, _ in _DEMOS.values():
        source = ROOT / "otel_handoff" / "cli" / f"{module}.py"
        assert f"async def {function}(" in source.read_text(), (module, function)


def test_names_reads_as_a_sentence() -> None:
    listed = names()
    assert listed.count(" and ") == 1 and listed.endswith(f" and {FRAMEWORKS[-1].name}")
    assert all(framework.name in listed and "(" not in framework.name for framework in FRAMEWORKS)


def test_doctor_names_every_framework() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}  # no endpoint to probe
    result = subprocess.run(
        [sys.executable, "-m", "otel_handoff", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )
    frameworks = result.stdout.split("Frameworks\n")[1].split("\nRequirements")[0]
    assert named(frameworks) == KEYS, frameworks
    for framework in FRAMEWORKS:
        assert f"[{framework.extra}]" in any_hint()


# --- prose --------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", list(TEXTS))
def test_every_list_of_frameworks_names_them_all(where: str) -> None:
    """A list that leaves a framework out is one written before it was added, unless it says why."""
    partial = {(page, words): left_out for page, words, left_out, _ in PARTIAL}
    incomplete = []
    for unit in units(TEXTS[where]):
        found = named(unit)
        if len(found) < LIST or found == KEYS:
            continue
        left_out = next(
            (out for (page, text), out in partial.items() if page == where and text in unit), None
        )
        if left_out is None or found | left_out != KEYS:
            incomplete.append(f"{sorted(KEYS - found)} missing from: {unit[:300]}")
    assert not incomplete, "\n".join(incomplete)


def test_each_partial_list_is_still_there() -> None:
    for page, words, left_out, _ in PARTIAL:
        assert left_out < KEYS, (page, words)
        assert any(words in unit for unit in units(TEXTS[page])), (page, words)


_NUMBER = "two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
COUNT = re.compile(rf"\b(?:all|both) (?:{_NUMBER})\b|\b(?:{_NUMBER}) frameworks\b")


@pytest.mark.parametrize("where", list(TEXTS))
def test_no_text_counts_the_frameworks(where: str) -> None:
    """'all four' was right once: 'every framework' stays right."""
    counts = [match.group(0) for match in COUNT.finditer(" ".join(TEXTS[where].split()).lower())]
    assert not counts, f"{where}: {counts}: say which, or 'every framework'"


def test_the_suites_shared_runs_hold_every_framework_but_those_with_an_environment_of_their_own() -> None:
    """``tests/framework_runs.py`` feeds the dashboard's, the pipelines' and Jaeger's tests, which
    docs/metrics.md names framework by framework: a framework missing there is missing quietly."""
    from environments import OWN_ENVIRONMENTS
    from framework_runs import FRAMEWORK_RUNS

    assert set(FRAMEWORK_RUNS) == {f.span_framework for f in FRAMEWORKS if f.key not in OWN_ENVIRONMENTS}
