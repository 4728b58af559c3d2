"""Every extra resolves at once in a fresh venv, as the README installs it: no resolver backtracking.

``pip install --dry-run '.[EXTRA]'`` in a new venv (pip's resolver starts from nothing; its HTTP
cache may be warm), each extra alone, as a user installs it into the venv the README names. pip
says ``This could take a while`` when it starts backtracking (``[strands]`` did, through every
``opentelemetry-instrumentation-threading`` from 0.66b1 down to 0.57b0: 248 s). Minutes of pip and
network, so not in the default run: ``OTEL_HANDOFF_INSTALL_TIMES=1 pytest tests/test_install_times.py -s``
(``.ci/run`` runs it); the times go to stdout and ``install-times.json`` in the test's folder.
Measured on a loaded 2-core machine whose pip caches no HTTP: ``[livekit]`` 83 s, ``[strands]``
94-142 s, none backtracking; ``[strands]`` without its bounds was still backtracking at 900 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_handoff.core.frameworks import FRAMEWORKS

ROOT = Path(__file__).resolve().parent.parent
BACKTRACKING = ("This could take a while", "is looking at multiple versions of")
# seconds, the bound with a warm pip cache (issue 48); a machine whose pip caches no HTTP
# (every package's metadata downloaded anew) may set OTEL_HANDOFF_INSTALL_SECONDS higher
WITHIN = float(os.environ.get("OTEL_HANDOFF_INSTALL_SECONDS", "90"))

pytestmark = pytest.mark.skipif(
    os.environ.get("OTEL_HANDOFF_INSTALL_TIMES") != "1",
    reason="minutes of pip: OTEL_HANDOFF_INSTALL_TIMES=1 pytest tests/test_install_times.py",
)


@pytest.mark.parametrize("extra", [f.extra for f in FRAMEWORKS])
def test_each_extra_resolves_without_backtracking(extra: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    start = time.monotonic()
    run = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--dry-run", "--disable-pip-version-check", f".[{extra}]"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.monotonic() - start
    said = (run.stdout + run.stderr).splitlines()
    backtracked = [line for line in said if any(words in line for words in BACKTRACKING)]
    print(f"[{extra}]: {seconds:.0f} s, {len(backtracked)} backtracking line(s)")
    (tmp_path / "install-times.json").write_text(json.dumps({"extra": extra, "seconds": seconds}))
    assert run.returncode == 0, run.stderr[-3000:]
    assert not backtracked, backtracked[:3]
    assert seconds < WITHIN, f"[{extra}] took {seconds:.0f} s to resolve"
