"""docs/export.md's "See a handoff in a UI", as a user without Docker follows it.

Phoenix: the release the page installs is the one the suite runs, started as the page starts it
(``PHOENIX_HOST=127.0.0.1 phoenix serve``); the page's demo command, pointed at it, puts the
handoffs in the project ``default`` the page sends the user to. Jaeger: the Jaeger built from its
Go module, run with no flags as the page runs the release archive, takes the page's demo command
over OTLP and serves the placeholder the page quotes where Jaeger's own builds serve the UI.
"""

from __future__ import annotations

import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from receivers import Phoenix, arrived, run_demo, shared_phoenix, wait_until
from stack import Jaeger, executable, namespace

from otel_handoff.cli.demo_export import DEFAULT_SERVICE_NAME
from otel_handoff.core import schema as sc

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
FLAT = " ".join(PAGE.split())
PLACEHOLDER = "This is not the Jaeger UI you are looking for"


def block(label: str) -> str:
    """The bash block after ``<!-- label -->``."""
    found = re.search(rf"<!-- {re.escape(label)} -->\n```bash\n(.*?)```", PAGE, flags=re.S)
    assert found is not None, label
    return found.group(1)


def settings_of(command: str) -> dict[str, str]:
    """The ``NAME=value`` settings in front of a command."""
    return dict(re.findall(r"\b([A-Z_]+)=(\S+)", command.split("otel-handoff")[0]))


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with shared_phoenix(tmp_path_factory) as server:
        yield server


def test_phoenix_without_docker_as_the_page_says(phoenix: Phoenix, tmp_path: Path) -> None:
    install, serve = block("phoenix: install, serve").strip().splitlines()
    pinned = re.search(r'PHOENIX_VERSION="([^"]+)"', (ROOT / ".ci" / "install-receivers.sh").read_text())
    assert pinned is not None and f"'arize-phoenix=={pinned.group(1)}'" in install
    # the suite's Phoenix runs as the page's: `phoenix serve` with PHOENIX_HOST=127.0.0.1
    assert serve.split("#")[0].split() == ["PHOENIX_HOST=127.0.0.1", ".venv-phoenix/bin/phoenix", "serve"]
    process = Path(f"/proc/{phoenix.process.pid}")
    assert (process / "cmdline").read_bytes().split(b"\0")[-2:] == [b"serve", b""]
    assert b"PHOENIX_HOST=127.0.0.1" in (process / "environ").read_bytes().split(b"\0")

    send = block("phoenix: send").strip()
    assert send.endswith("otel-handoff demo")
    settings = settings_of(send)
    assert settings.pop("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://127.0.0.1:6006"  # Phoenix's own port
    run = run_demo(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url, **settings)
    assert "Traceback" not in run.stderr and "Failed to export" not in run.stderr, run.stderr
    spans = arrived(run.exported, lambda: phoenix.spans("default"))  # the project the page names
    sent = {s["span_id"] for s in run.handoffs()}
    assert sent and sent <= {s["span_id"] for s in spans if s["name"] == sc.SPAN_HANDOFF}
    assert "the project **default**" in PAGE
    with urllib.request.urlopen(f"{phoenix.url}/", timeout=10) as answer:  # the UI the page opens
        assert answer.status == 200 and "<html" in answer.read().decode(errors="replace").lower()


@pytest.fixture(scope="module")
def jaeger_without_flags(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """``jaeger`` as the page runs the release archive's: no flags, its all-in-one in memory."""
    space = namespace(tmp_path_factory.mktemp("jaeger-no-flags"))
    try:
        binary = executable("jaeger", "OTEL_HANDOFF_JAEGER")
        log = space.workdir / "jaeger.log"
        # Jaeger traces its own queries to 127.0.0.1:4317 unless told not to: to itself, here
        env = {"PATH": os.environ.get("PATH", ""), "OTEL_TRACES_SAMPLER": "always_off"}
        process = space.start([str(binary)], log, env)
        grpc, http, query = space.expose("localhost:4317", "localhost:4318", "localhost:16686")
        jaeger = Jaeger(process, grpc, http, query, log)
        wait_until(lambda: process.poll() is not None or jaeger.ready(), "Jaeger to start", timeout=60)
        assert process.poll() is None, jaeger.tail()
        yield jaeger
    finally:
        space.stop()


def test_jaeger_from_its_go_module_runs_without_flags_and_has_no_ui(
    jaeger_without_flags: Jaeger, tmp_path: Path
) -> None:
    jaeger = jaeger_without_flags
    command = re.search(r"no flags runs all-in-one.*?`([^`]*otel-handoff demo)`", FLAT)
    assert command is not None
    settings = settings_of(command.group(1))
    assert settings.pop("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://127.0.0.1:4317"
    run = run_demo(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=jaeger.grpc_endpoint, **settings)
    assert "Failed to export" not in run.stderr, run.stderr
    spans = arrived(run.exported, lambda: jaeger.spans(DEFAULT_SERVICE_NAME))
    assert {s["span_id"] for s in run.handoffs()} <= {s["span_id"] for s in spans}

    with urllib.request.urlopen(f"{jaeger.url}/", timeout=10) as answer:
        page = answer.read().decode(errors="replace")
    assert PLACEHOLDER in page, page[:500]  # the day the build has the UI, the page must say so
    assert f'("{PLACEHOLDER}")' in FLAT
