"""The README is part of the contract: its commands are what CI runs, its tables the schema."""

from __future__ import annotations

import re
from pathlib import Path

from otel_handoff.core import schema as sc

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", README, flags=re.S)


def test_two_setup_commands_and_ci_runs_the_test_one() -> None:
    commands = [line for block in bash_blocks() for line in block.splitlines() if "venv" in line]
    demo = [c for c in commands if "otel-handoff demo" in c]
    tests = [c for c in commands if "pytest" in c]
    assert len(demo) == 1 and len(tests) == 1, commands
    assert "pip install '.[livekit]'" in demo[0]
    assert tests[0] in (ROOT / ".ci" / "run").read_text(), "CI must run the README's test command"


def test_every_span_attribute_and_metric_is_documented() -> None:
    names = {
        value
        for key, value in vars(sc).items()
        if key.isupper()
        and isinstance(value, str)
        and (value.startswith(("agent_handoff.", "gen_ai.")) or value == sc.SPAN_HANDOFF)
    }
    missing = sorted(name for name in names if f"`{name}`" not in README)
    assert not missing, f"not in the README tables: {missing}"
