"""A browser looks at a demo handoff trace in Arize Phoenix's trace view.

Headless Chromium (the distribution's, driven by Playwright) opens the trace, selects the
``agent_handoff`` span and checks the page shows it, its phase children and its attributes.
The screenshot goes to ``artifacts/phoenix-handoff-trace.png``; with
``OTEL_HANDOFF_UPDATE_DOCS=1`` it also replaces ``docs/phoenix-handoff-trace.png``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from receivers import (
    Phoenix,
    arrived,
    check_intact,
    missing,
    project_name,
    run_demo,
    shared_phoenix,
    wait_until,
)

from otel_handoff.core import schema as sc

REPO = Path(__file__).resolve().parents[1]
ARTIFACT = REPO / "artifacts" / "phoenix-handoff-trace.png"
DOCS_COPY = REPO / "docs" / "phoenix-handoff-trace.png"
UI_TIMEOUT_MS = 60_000


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with shared_phoenix(tmp_path_factory) as server:
        yield server


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        missing("chromium is not installed")
    return str(path)


def test_phoenix_trace_view_shows_the_handoff_and_its_phases(phoenix: Phoenix, tmp_path: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright (the Python driver) is not installed")
        return
    browser_path = chromium()

    project = project_name()
    run = run_demo(
        tmp_path,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
    )
    spans = arrived(run.exported, lambda: phoenix.spans(project))
    check_intact(run.exported, spans)

    # the first handoff hanging directly off LiveKit's session span: the clearest tree to look at
    by_id = {s["span_id"]: s for s in spans}
    handoff = next(
        s
        for s in sorted(spans, key=lambda s: (s["trace_id"], s["attributes"].get(sc.SEQUENCE, 0)))
        if s["name"] == sc.SPAN_HANDOFF and by_id[s["parent_id"]]["parent_id"] is None
    )
    phases = sorted({s["name"] for s in spans if s["parent_id"] == handoff["span_id"]})
    assert phases
    project_id = wait_until(lambda: phoenix.project_id(project), "the Phoenix project")
    url = f"{phoenix.url}/projects/{project_id}/traces/{handoff['trace_id']}"

    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=browser_path, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.goto(url, timeout=UI_TIMEOUT_MS)
            node = page.get_by_text(sc.SPAN_HANDOFF, exact=True).first
            node.wait_for(timeout=UI_TIMEOUT_MS)
            for phase in phases:
                page.get_by_text(phase, exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
            node.click()
            # the span's details: its attributes, as Phoenix renders them
            page.get_by_text(sc.DURATION, exact=True).first.wait_for(timeout=UI_TIMEOUT_MS)
            page.screenshot(path=str(ARTIFACT))
            text = page.inner_text("body")
        finally:
            browser.close()

    assert handoff["trace_id"] in text
    for phase in phases:
        assert phase in text, f"{phase} is not on the page"
    for key in (sc.FROM_AGENT_NAME, sc.TO_AGENT_NAME, sc.OUTCOME, sc.TRIGGER):
        assert key in text and str(handoff["attributes"][key]) in text
    assert ARTIFACT.stat().st_size > 10_000
    if os.environ.get("OTEL_HANDOFF_UPDATE_DOCS") == "1":
        DOCS_COPY.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ARTIFACT, DOCS_COPY)
