"""Microsoft Agent Framework over A2A: a ``HandoffBuilder`` workflow whose triage agent asks a
billing agent another process serves (``A2AAgent`` as its tool; ``A2AExecutor`` on the other
side; ``agent-framework-a2a``, a pre-release, in its own environment: ``tests/environments.py``).
Both processes are traced with no code (``OTEL_HANDOFF_AUTO_INSTRUMENT``), each to its own file.
The call is a delegation, not a handoff: no ``agent_handoff`` of its own (triage's handoff to
account, in the same run, is one), but the request carries the caller's trace context
(``otel_handoff.core.a2a``, switched on by Agent Framework's instrumentor) and the server runs
billing under it: one trace.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from environments import AGENT_FRAMEWORK_A2A_REQUIREMENTS, ROOT, environment

from otel_handoff.cli.offline import agent_framework_remote as afr
from otel_handoff.cli.span_sources import read_spans
from otel_handoff.core import schema as sc

VENV = ".venv-agent-framework-a2a"


def _auto(service: str, export: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH", "VIRTUAL_ENV"))}
    return base | {
        "OTEL_HANDOFF_AUTO_INSTRUMENT": "true",
        "OTEL_TRACES_EXPORTER": "otel_handoff_file",
        "OTEL_HANDOFF_EXPORT_FILE": str(export),
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": service,
    }


@pytest.fixture(scope="module")
def delegation(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run across two processes of the environment's Python: what the caller printed and each
    side's spans."""
    python = str(environment(VENV, AGENT_FRAMEWORK_A2A_REQUIREMENTS) / "bin" / "python")
    folder = tmp_path_factory.mktemp("a2a")
    with afr.remote_billing(python, env=_auto("billing", folder / "server.jsonl")) as url:
        caller = subprocess.run(
            [python, "-m", afr.__name__, url],
            cwd=ROOT,
            env=_auto("support", folder / "client.jsonl"),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert caller.returncode == 0, caller.stderr[-3000:]
    return {
        "printed": json.loads(caller.stdout.strip().splitlines()[-1]),
        "client": read_spans(str(folder / "client.jsonl")),
        "server": read_spans(str(folder / "server.jsonl")),
    }


def test_the_app_still_works(delegation: dict[str, Any]) -> None:
    assert delegation["printed"]["handoffs"] == [["triage", "account"]]
    assert any(afr.ANSWER in said for said in delegation["printed"]["billing"]), delegation["printed"]


def test_the_delegation_is_no_handoff(delegation: dict[str, Any]) -> None:
    handoffs = [s for s in delegation["client"] if s.name == sc.SPAN_HANDOFF]
    assert [(s.attributes[sc.FROM_AGENT_NAME], s.attributes[sc.TO_AGENT_NAME]) for s in handoffs] == [
        ("triage", "account")
    ]
    assert not any(s.name.startswith(sc.SPAN_HANDOFF) for s in delegation["server"])


def test_the_served_agent_runs_under_the_call_that_asked_it(delegation: dict[str, Any]) -> None:
    client, server = delegation["client"], delegation["server"]
    [tool] = [s for s in client if s.name == "execute_tool billing"]  # Agent Framework's: the call
    [billing] = [s for s in server if s.name == "invoke_agent billing"]
    assert billing.trace_id == tool.trace_id
    assert billing.parent_id == tool.span_id  # A2AExecutor.execute ran under the caller's context
    # all of what the executor did: under that one span of the caller's
    ids = {s.span_id for s in server}
    tops = [s for s in server if s.trace_id == tool.trace_id and s.parent_id not in ids]
    assert tops and {s.parent_id for s in tops} == {tool.span_id}
    assert len({s.trace_id for s in client}) == 1


def test_nothing_of_the_conversation_on_a_span(delegation: dict[str, Any]) -> None:
    texts = (afr.QUESTION, afr.ANSWER, afr.REPLY)
    for side in ("client", "server"):
        for span in delegation[side]:
            for key, value in span.attributes.items():
                assert not any(text in str(value) for text in texts), (side, span.name, key)
