"""A scripted agent server in a process of its own, as a remote agent is deployed: the demos'
and tests' one way to start one, wait for its port and stop it."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


@contextlib.contextmanager
def server_process(command: list[str], env: dict[str, str] | None = None) -> Iterator[int]:
    """Run ``command`` (a server that prints ``port N`` once it listens) for the block; yields N."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else dict(os.environ),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("port "):
            process.kill()
            raise RuntimeError(f"the billing server did not start: {line}{process.communicate()[1][-2000:]}")
        yield int(line.split()[1])
    finally:
        if process.poll() is None:
            process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=30)
        if process.poll() is None:
            process.kill()
            process.communicate()
