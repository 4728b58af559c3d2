"""The README and docs/ are part of the contract: their commands are what CI runs, their tables
the schema, their examples the real output of the command they show."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import environments
import pytest

from otel_handoff.core import schema as sc

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_two_setup_commands_in_their_own_venvs_and_ci_runs_the_test_one() -> None:
    commands = [line for block in bash_blocks() for line in block.splitlines() if "venv" in line]
    demo = [c for c in commands if "otel-handoff demo" in c]
    tests = [c for c in commands if "pytest" in c]
    assert len(demo) == 1 and len(tests) == 1, commands
    assert "pip install '.[livekit]'" in demo[0]
    assert tests[0] in (ROOT / ".ci" / "run").read_text(), "CI must run the README's test command"
    venvs = [re.search(r"venv (\S+)", command).group(1) for command in (demo[0], tests[0])]
    assert venvs[0] != venvs[1], "trying it and developing it do not share a venv"


def test_the_demo_line_says_which_extras_need_a_venv_of_their_own() -> None:
    """Installing one of these into the "Try it" venv exits 0 and breaks it (pip's resolver ERROR):
    the README says so where it tells the user to install an extra."""
    from otel_handoff.core.frameworks import BY_KEY

    demo_line = " ".join(README.split("--framework livekit` (default)")[1].split("\n\n")[0].split())
    for key in environments.OWN_ENVIRONMENTS:
        assert f"`[{BY_KEY[key].extra}]` in a venv of its own" in demo_line, key
    assert "otel-handoff doctor" in demo_line


def test_the_readme_is_short_and_links_every_docs_page() -> None:
    assert len(README.splitlines()) <= 120
    for page in DOCS:
        assert f"docs/{page}" in README, page


def test_every_span_attribute_and_metric_is_documented() -> None:
    everything = README + "".join(DOCS.values())
    names = {
        value
        for key, value in vars(sc).items()
        if key.isupper()
        and isinstance(value, str)
        and (value.startswith(("agent_handoff.", "gen_ai.")) or value == sc.SPAN_HANDOFF)
    }
    missing = sorted(name for name in names if f"`{name}`" not in everything)
    assert not missing, f"not in the README or docs: {missing}"


# --- the examples are real output ----------------------------------------------------------------
EXAMPLE = re.compile(r"<!-- output of: ([^\n]+?) -->\n```text\n(.*?)```", flags=re.S)  # a command on one line
_BARS = re.compile(r"[█▏▎▍▌▋▊▉]+")
_HEX = re.compile(r"\b[0-9a-f]{32}\b")
_NUMBER = re.compile(r"\d+(\.\d+)?")


def normalized(line: str) -> str:
    """A line with what changes from run to run (times, ids, bar lengths, spacing) made equal."""
    line = _HEX.sub("H", line)
    line = _NUMBER.sub("N", line)
    line = _BARS.sub("▆", line)
    return " ".join(line.replace("│", " │ ").split())


def examples() -> list[tuple[str, str, str]]:
    pages = {"README.md": README, **DOCS}
    return [(page, command, body) for page, text in pages.items() for command, body in EXAMPLE.findall(text)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs")


@functools.cache
def run(command: str, workdir: Path) -> str:
    """``otel-handoff ...`` as a user types it, optionally with ``(NAME=value ...)`` settings; once
    per command (two pages' blocks may show one command's output)."""
    settings = dict(re.findall(r"(\w+)=(\S+?)[ )]", command))
    argv = command.split(" (")[0].split()
    assert argv[0] == "otel-handoff"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"NO_COLOR": "1"} | settings
    if argv[1:2] == ["summary"] and not (workdir / argv[2]).exists():
        run(f"otel-handoff demo --export {argv[2]}", workdir)
    python = sys.executable
    if argv[1:2] == ["demo"] and "--framework" in argv:  # maybe a framework with an environment of its own
        python = environments.python_for(argv[argv.index("--framework") + 1])
    result = subprocess.run(
        [python, "-m", "otel_handoff", *argv[1:]],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return result.stdout


def test_there_are_examples_to_check() -> None:
    assert len(examples()) >= 6 and any(page == "README.md" for page, _, _ in examples())


@pytest.mark.parametrize(("page", "command", "body"), examples(), ids=lambda v: v if "\n" not in v else "")
def test_each_example_is_the_commands_real_output(page: str, command: str, body: str, workdir: Path) -> None:
    """The example's lines are the real output's, in order and next to each other, from its first
    line to its last, but where `…` stands for lines left out (at the start and end too)."""
    output = [normalized(line) for line in run(command, workdir).splitlines()]
    position, skip = 0, False
    for line in body.splitlines():
        if line.strip() == "…":
            skip = True
            continue
        want = normalized(line)
        candidates = range(position, len(output)) if skip else range(position, min(position + 1, len(output)))
        found = next((i for i in candidates if output[i] == want), None)
        assert found is not None, f"{page}: `{command}`: not in its output at line {position}: {line!r}"
        position, skip = found + 1, False
    rest = [line for line in output[position:] if line]
    assert skip or not rest, f"{page}: `{command}`: output goes on without a `…`: {rest[0]!r}"


def test_each_hint_names_the_venv_the_readme_names(tmp_path: Path) -> None:
    """demo's, doctor's and the start-up hook's install hint (one property) for a framework with a
    venv of its own: that venv, as the README and the framework's page name it."""
    from otel_handoff.core.frameworks import BY_KEY, FRAMEWORKS, SHARED_VENV

    assert {f.key: f.venv for f in FRAMEWORKS if f.venv != SHARED_VENV} == {
        key: venv for key, (venv, _) in environments.OWN_ENVIRONMENTS.items()
    }
    for key, (venv, _) in environments.OWN_ENVIRONMENTS.items():
        framework = BY_KEY[key]
        assert f"`[{framework.extra}]` in a venv of its own (`{venv}`)" in " ".join(README.split())
        assert f"python3 -m venv {venv} && {venv}/bin/pip install" in framework.install_hint
        assert f"{venv}/bin/pip install '.[{framework.extra}]'" in DOCS[f"{key}.md"]
        try:
            importable = importlib.util.find_spec(framework.demo_module) is not None
        except ImportError:
            importable = False
        if importable:
            continue
        demo = subprocess.run(
            [sys.executable, "-m", "otel_handoff", "demo", "--framework", key],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert demo.returncode == 2
        assert f"python3 -m venv {venv} && {venv}/bin/pip install" in demo.stderr, demo.stderr
    for framework in FRAMEWORKS:
        if framework.venv == SHARED_VENV and framework.key != "livekit":
            assert f"`[{framework.extra}]`" in README.split("into the same `.venv`")[0].split("picks")[-1]
