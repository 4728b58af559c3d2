"""Interpreter start-up and import cost of otel-handoff, measured in throwaway environments.

Every variant is a venv made in a temporary directory from the same base interpreter, whose
site-packages links every entry of the current environment's site-packages except
otel-handoff's own, and then adds otel-handoff in one way:

- ``not_installed``: otel-handoff absent (``import otel_handoff`` fails);
- ``installed``: otel-handoff copied in as a wheel would install it (package + dist-info,
  byte-compiled), so anything the distribution runs at start-up runs;
- ``editable``: the ``pip install -e`` hook (``__editable__*.pth`` + its finder), as on a
  developer machine;
- ``pth_unset`` / ``pth_false`` / ``pth_true``: ``installed`` plus the auto-instrument ``.pth``
  start-up hook, with ``OTEL_HANDOFF_AUTO_INSTRUMENT`` unset / ``false`` / ``true`` (only when
  such a ``.pth`` exists: found in the repository or given with ``--pth``).

Each variant runs ``python -c pass`` (and the installed one ``import otel_handoff`` /
``import otel_handoff.livekit``) repeatedly, interleaved, timing the whole subprocess (wall,
like hyperfine) and separately reading ``-X importtime`` (the sum of the top-level imports'
cumulative times, much less noisy than wall). Deltas are medians of per-round paired
differences. Nothing outside the temporary directory is written (``PYTHONDONTWRITEBYTECODE=1``
keeps the shared ``__pycache__`` untouched).
"""

from __future__ import annotations

import compileall
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import timeit
import venv
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

AUTO_ENV_VAR = "OTEL_HANDOFF_AUTO_INSTRUMENT"
DIST_NAME = "otel-handoff"
PACKAGE = "otel_handoff"


@dataclass(frozen=True)
class StartupCase:
    """One subprocess to time: in which environment, running what, with which variable."""

    key: str
    env: str
    code: str
    auto_var: str | None = None  # value of AUTO_ENV_VAR, None = unset
    baseline: str | None = None  # case this one is compared with


def _own_entries(site: Path) -> set[str]:
    """Names in ``site`` that belong to otel-handoff: package, dist-info, editable and start-up hooks."""
    return {entry.name for entry in site.iterdir() if PACKAGE in entry.name.replace("-", "_").lower()}


def find_pth(repo: Path) -> Path | None:
    """The auto-instrument ``.pth`` the repository ships, if it has one yet."""
    skip = {"build", "dist", "__pycache__", "node_modules"}
    for path in sorted(repo.rglob("*.pth")):
        parts = path.relative_to(repo).parts[:-1]
        # not in a virtual environment (.venv, CI's .matrix cells, ...) nor a build directory
        if not skip.intersection(parts) and not any(part.startswith(".") for part in parts):
            return path
    return None


def _make_env(root: Path, name: str, site: Path, extra: Iterable[tuple[Path, bool]]) -> Path:
    """A venv whose site-packages links ``site`` minus otel-handoff, plus ``extra`` (path, copy?)."""
    env_dir = root / name
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    skip = _own_entries(site)
    for entry in site.iterdir():
        if entry.name not in skip:
            (target / entry.name).symlink_to(entry)
    for path, copy in extra:
        dest = target / path.name
        if not copy:
            dest.symlink_to(path)
        elif path.is_dir():
            shutil.copytree(path, dest, ignore=shutil.ignore_patterns("__pycache__"))
            compileall.compile_dir(str(dest), quiet=1)
        else:
            shutil.copy2(path, dest)
    return python


def _clean_environ(auto_var: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != AUTO_ENV_VAR}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if auto_var is not None:
        env[AUTO_ENV_VAR] = auto_var
    return env


def _importtime(python: Path, code: str, env: dict[str, str]) -> tuple[float, set[str]]:
    """Sum of top-level cumulative import times (µs) and the modules imported."""
    proc = subprocess.run(
        [str(python), "-X", "importtime", "-c", code],
        env=env,
        cwd=python.parents[2],  # not the repository: `-c` puts the working directory on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    total, modules = 0.0, set()
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|", 2)
        modules.add(name.strip())
        if not name.startswith("  "):  # top level: one space after the bar, deeper ones indent
            total += float(cumulative)
    return total, modules


def _wall_ms(python: Path, code: str, env: dict[str, str]) -> float:
    start = time.perf_counter_ns()
    subprocess.run([str(python), "-c", code], env=env, cwd=python.parents[2], check=True, capture_output=True)
    return (time.perf_counter_ns() - start) / 1e6


class StepSkipped(Exception):
    """This step cannot run in this install; the message says why (the rest is still reported)."""


def measure(runs: int, repo: Path, pth: Path | None = None) -> dict[str, Any]:
    """Build the environments, time every case ``runs`` times interleaved, and summarise."""
    site = Path(sysconfig.get_paths()["purelib"])
    try:
        dist = metadata.distribution(DIST_NAME)
    except metadata.PackageNotFoundError:
        raise StepSkipped(
            f"{DIST_NAME} is not installed in this Python ({sys.executable}): start-up compares installs "
            "of it; pip install -e . (or the wheel) first"
        ) from None
    dist_info = Path(str(dist._path))  # type: ignore[attr-defined]
    package_dir = repo / PACKAGE
    # the development install exactly as it is (editable hook, start-up hook, dist-info); a wheel
    # install has none of the editable hook, and then there is no `editable` case to measure
    editable = [site / n for n in sorted(_own_entries(site)) if n != PACKAGE]
    # setuptools names its hook `__editable__.*.pth` or `_editable_impl_*.pth` (by release)
    is_editable = any("editable" in p.name for p in editable)
    pth = pth or find_pth(repo)

    cases = [
        StartupCase("not_installed", "not_installed", "pass"),
        StartupCase("installed", "installed", "pass", baseline="not_installed"),
        *([StartupCase("editable", "editable", "pass", baseline="not_installed")] if is_editable else []),
        StartupCase("import_otel_handoff", "installed", f"import {PACKAGE}", baseline="installed"),
        StartupCase(
            "import_otel_handoff_livekit", "installed", f"import {PACKAGE}.livekit", baseline="installed"
        ),
    ]
    if pth is not None:
        cases += [
            StartupCase("pth_unset", "pth", "pass", baseline="not_installed"),
            StartupCase("pth_false", "pth", "pass", auto_var="false", baseline="not_installed"),
            # not a goal: what turning auto-instrumentation on costs at start-up
            StartupCase("pth_true", "pth", "pass", auto_var="true", baseline="not_installed"),
        ]

    root = Path(tempfile.mkdtemp(prefix="otel-handoff-startup-"))
    try:
        envs = {
            "not_installed": _make_env(root, "not_installed", site, []),
            "installed": _make_env(root, "installed", site, [(package_dir, True), (dist_info, True)]),
        }
        if is_editable:
            envs["editable"] = _make_env(root, "editable", site, [(p, False) for p in editable])
        if pth is not None:
            envs["pth"] = _make_env(root, "pth", site, [(package_dir, True), (dist_info, True), (pth, True)])
        # sanity: the variants really differ
        probe = "import importlib.util as u; print(u.find_spec('otel_handoff') is not None)"
        for name, python in envs.items():
            found = subprocess.run(
                [str(python), "-c", probe],
                env=_clean_environ(None),
                cwd=root,
                capture_output=True,
                text=True,
            ).stdout.strip()
            if (found == "True") == (name == "not_installed"):
                raise RuntimeError(f"start-up env {name}: otel_handoff importable={found}")

        wall: dict[str, list[float]] = {c.key: [] for c in cases}
        imports: dict[str, list[float]] = {c.key: [] for c in cases}
        modules: dict[str, set[str]] = {}
        for _ in range(2):  # warm the page cache
            for case in cases:
                _wall_ms(envs[case.env], case.code, _clean_environ(case.auto_var))
        for r in range(runs):
            order = cases[r % len(cases) :] + cases[: r % len(cases)]
            for case in order:
                env = _clean_environ(case.auto_var)
                wall[case.key].append(_wall_ms(envs[case.env], case.code, env))
                total, mods = _importtime(envs[case.env], case.code, env)
                imports[case.key].append(total / 1000)
                modules[case.key] = mods
    finally:
        shutil.rmtree(root, ignore_errors=True)

    out: dict[str, Any] = {
        "runs": runs,
        "pth": str(pth) if pth is not None else None,
        "editable_note": None if is_editable else "not an editable install: no `editable` case",
        "hook_line_us": _hook_line_us(pth) if pth is not None else None,
        "pth_note": None
        if pth is not None
        else "no auto-instrument .pth hook in the repository yet (issue 4): pth_unset not measured",
        "cases": {},
    }
    for case in cases:
        entry: dict[str, Any] = {
            "env": case.env,
            "code": case.code,
            AUTO_ENV_VAR: case.auto_var,
            "wall_ms_median": statistics.median(wall[case.key]),
            "wall_ms_min": min(wall[case.key]),
            "importtime_ms_median": statistics.median(imports[case.key]),
        }
        if case.baseline is not None:
            base = case.baseline
            entry["baseline"] = base
            # paired: each round ran every case once, so slow drifts of the machine cancel out
            entry["wall_ms_delta"] = statistics.median(
                x - y for x, y in zip(wall[case.key], wall[base], strict=True)
            )
            entry["wall_ms_min_delta"] = entry["wall_ms_min"] - min(wall[base])
            entry["importtime_ms_delta"] = statistics.median(
                x - y for x, y in zip(imports[case.key], imports[base], strict=True)
            )
            entry["extra_modules"] = sorted(modules[case.key] - modules[base])
        out["cases"][case.key] = entry
    return out


def _hook_line_us(pth: Path) -> float:
    """What the hook's line costs at start-up with the variable unset, timed in this process.

    Interpreter start-up varies by a millisecond from run to run on a shared machine; the line
    itself is a few microseconds, and this measures it exactly (best of 5 x 10,000).
    """
    line = next(x for x in pth.read_text().splitlines() if x.startswith("import"))
    code = compile(line, str(pth), "exec")
    saved = os.environ.pop(AUTO_ENV_VAR, None)
    try:
        best = min(timeit.repeat(lambda: exec(code, {}), number=10_000, repeat=5))
    finally:
        if saved is not None:
            os.environ[AUTO_ENV_VAR] = saved
    return best / 10_000 * 1e6


if __name__ == "__main__":
    import json

    print(json.dumps(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10, Path.cwd()), indent=2))
