"""docs/ and the README hold only what the code holds: each factual claim a test can read off the
code is read off it here (the output examples are run by ``test_readme.py``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_handoff.core import schema as sc
from otel_handoff.core.frameworks import FRAMEWORKS

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    path: path.read_text(encoding="utf-8")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
}
MODEL = (ROOT / "docs" / "model.md").read_text(encoding="utf-8")


def table_rows(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with ``header``."""
    rows = []
    for line in text[text.index(header) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_phase_table_is_the_registry() -> None:
    documented = {
        role: set(re.findall(r"`(\w+)`", phases))
        for role, phases, _ in table_rows(MODEL, "| role | phases |")
    }
    registry: dict[str, set[str]] = {}
    for spec in sc.PHASE_REGISTRY:
        registry.setdefault(spec.role, set()).add(spec.name)
    assert documented == registry


def test_what_each_duration_measures_is_the_framework_registry() -> None:
    documented = dict(table_rows(MODEL, "| framework | `agent_handoff.duration` |"))
    assert documented == {framework.key: framework.duration for framework in FRAMEWORKS}


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH_IN_BACKTICKS = re.compile(r"`((?:tests|otel_handoff|collector-config|bench|docs|\.ci)/[\w./-]+)`")


@pytest.mark.parametrize("page", list(PAGES), ids=lambda p: p.name)
def test_every_link_and_named_file_exists(page: Path) -> None:
    text = PAGES[page]
    for target in LINK.findall(text):
        if not target.startswith(("http://", "https://")):
            assert (page.parent / target).exists(), f"{page.name}: link to {target}"
    for path in PATH_IN_BACKTICKS.findall(text):
        path = path.rstrip("/.")
        assert (ROOT / path).exists() or list(ROOT.glob(path)), f"{page.name} names {path}"


def test_the_soak_numbers() -> None:
    import test_soak

    per_round = test_soak.SESSIONS * sum(test_soak.PHASES.values())
    text = PAGES[ROOT / "docs" / "development.md"]
    rounds = "2 \N{MULTIPLICATION SIGN}"
    assert (
        f"a soak of {rounds} {per_round:,} handoffs across {test_soak.SESSIONS} concurrent sessions" in text
    )


def test_the_overhead_page_names_the_benchs_machine() -> None:
    machine = re.search(r"^Machine: (.*)$", (ROOT / "bench" / "results" / "latest.md").read_text(), re.M)
    assert machine is not None
    vendor = (
        "Intel Xeon" if "Xeon" in machine.group(1) else "AMD EPYC" if "EPYC" in machine.group(1) else None
    )
    assert vendor is not None and vendor in PAGES[ROOT / "docs" / "overhead.md"]


def test_what_the_install_script_installs_is_said() -> None:
    script = (ROOT / ".ci" / "install-receivers.sh").read_text()
    readme, development = PAGES[ROOT / "README.md"], PAGES[ROOT / "docs" / "development.md"]
    for name, in_script in [
        ("rotel", "rotel"),
        ("Phoenix", "arize-phoenix"),
        ("Jaeger", "jaeger"),
        ("Prometheus", "prometheus"),
        ("Chromium", "chromium"),
        ("playwright", "playwright"),
        ("livekit-server", "livekit-server"),
    ]:
        assert in_script in script, name
        assert name in readme and name in development, name


def test_every_framework_folder_is_in_the_layout() -> None:
    for framework in FRAMEWORKS:
        folder = ROOT / Path(*framework.instrumentor.partition(":")[0].split("."))
        assert (folder / "package.py").exists(), folder
        assert f"{folder.name}/`" in PAGES[ROOT / "docs" / "development.md"], folder.name


def test_the_install_script_ends_with_its_total_time() -> None:
    """Each build says its time, the script its total last: what docs/development.md quotes."""
    script = (ROOT / ".ci" / "install-receivers.sh").read_text().rstrip().splitlines()
    assert script[-1].startswith('echo "  total: $SECONDS s'), script[-1]
    development = " ".join(PAGES[ROOT / "docs" / "development.md"].split())
    assert "its total (`total: … s`)" in development
    # cold builds vary run to run: said as the range measured, not as one figure
    span = r"\d+\N{EN DASH}\d+ s"
    assert re.search(rf"Jaeger {span}, then the collector {span}", development)


def test_the_wire_size_table_is_the_benchs_and_holds_every_framework() -> None:
    header = "| framework (demo) | handoffs |"
    results = (ROOT / "bench" / "results" / "wire_size.md").read_text()
    documented = table_rows(PAGES[ROOT / "docs" / "export.md"], header)
    assert documented == table_rows(results, header)
    assert [row[0] for row in documented] == [framework.key for framework in FRAMEWORKS]
