"""``examples/``: each framework's own-app example, run as its page says, with the page's output.

An example is an app as the framework's documentation writes one, a stand-in model its only
difference, with no tracing code: run with ``OTEL_HANDOFF_AUTO_INSTRUMENT`` and the file exporter,
then ``otel-handoff summary`` on the file, in the venv the README names for the framework. The
page's ``<!-- output of example: examples/FILE -->`` block is that output (times, ids and bar
lengths aside, as for the README's examples).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import environments
import pytest
from test_readme import DOCS, ROOT, normalized

from otel_handoff.core.frameworks import BY_KEY

EXAMPLES = {  # framework -> its example
    "strands": "strands_swarm.py",
    "llama-index": "llama_index_workflow.py",
    "agent-framework": "agent_framework_handoff.py",
    "openai-agents": "openai_agents_handoff.py",  # the SDK's own stand-in models: nothing of ours
    "langgraph": "langgraph_swarm_app.py",
    "google-adk": "google_adk_transfer.py",
    "ag2": "ag2_workflow.py",  # AG2's own stand-in models: nothing of ours
    "livekit": "livekit_session.py",
    "pipecat": "pipecat_flow.py",  # its LLM, TTS and output stage: offline stand-ins
}
BLOCK = re.compile(r"<!-- output of example: examples/(\S+) -->\n```text\n(.*?)```", flags=re.S)
RUN = (
    "OTEL_HANDOFF_AUTO_INSTRUMENT=true OTEL_TRACES_EXPORTER=otel_handoff_file "
    "OTEL_HANDOFF_EXPORT_FILE=spans.jsonl OTEL_METRICS_EXPORTER=none python examples/{example}"
)


def test_every_example_is_on_its_page_with_the_commands_to_run_it() -> None:
    assert sorted(path.name for path in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES.values())
    for key, example in EXAMPLES.items():
        page = DOCS[f"{key}.md"]
        assert "## Use it in your own app" in page, key
        assert RUN.format(example=example) in page and "otel-handoff summary spans.jsonl" in page, key
        assert [name for name, _ in BLOCK.findall(page)] == [example], key
        imports = re.findall(r"^(?:from|import) (\S+)", (ROOT / "examples" / example).read_text(), re.M)
        ours = [module for module in imports if module.startswith("otel_handoff")]
        stand_in = ["otel_handoff.cli.offline." + module_of(key)]
        assert ours in ([], stand_in), "no tracing code in the app: a stand-in model at most"


def module_of(key: str) -> str:
    """The offline module holding ``key``'s stand-ins."""
    return {"pipecat": "pipecat_flows"}.get(key, key.replace("-", "_"))


@pytest.mark.parametrize("key", list(EXAMPLES))
def test_the_example_runs_as_its_page_shows(key: str, tmp_path: Path) -> None:
    example = EXAMPLES[key]
    python = environments.python_for(key)  # the venv the README names for it
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"NO_COLOR": "1"}
    env = plain | dict(re.findall(r"(\w+)=(\S+)", RUN.split(" python ")[0]))
    untraced, app = (
        subprocess.run(
            [python, str(ROOT / "examples" / example)],
            cwd=tmp_path,
            env=variables,
            capture_output=True,
            text=True,
            timeout=180,
        )
        for variables in (plain, env)
    )
    # the app sees no difference: what it prints, and what its framework warns, alike
    assert app.returncode == 0, app.stderr[-3000:]
    assert (app.stdout, app.stderr) == (untraced.stdout, untraced.stderr)
    summary = subprocess.run(
        [python, "-m", "otel_handoff", "summary", "spans.jsonl"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (summary.returncode, summary.stderr) == (0, ""), summary.stderr
    output = [normalized(line) for line in (app.stdout + summary.stdout).splitlines()]
    (body,) = [body for name, body in BLOCK.findall(DOCS[f"{key}.md"]) if name == example]
    wanted = [normalized(line) for line in body.splitlines()]
    position, skip = 0, False
    for line in wanted:  # in order and next to each other, `…` standing for lines left out
        if line == "…":
            skip = True
            continue
        candidates = range(position, len(output)) if skip else range(position, min(position + 1, len(output)))
        found = next((i for i in candidates if output[i] == line), None)
        assert found is not None, f"{key}: not in the output at line {position}: {line!r}\n" + "\n".join(
            output
        )
        position, skip = found + 1, False
    assert skip or not [line for line in output[position:] if line], f"{key}: output goes on without a `…`"
    assert BY_KEY[key].span_framework in summary.stdout
