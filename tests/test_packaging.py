"""What a user installs: the wheel and sdist build, pass ``twine check``, install into a fresh venv
and run the demo; the typed public API checks with mypy; install hints fit where the user stands."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from receivers import clean_env

ROOT = Path(__file__).resolve().parent.parent


def run(command: list[str], cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


def test_the_public_api_type_checks() -> None:
    """``mypy`` with the project's configuration (pyproject.toml: the modules an app imports)."""
    result = run([sys.executable, "-m", "mypy"])
    assert "Success: no issues found" in result.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)])
    yield out


def test_wheel_and_sdist_metadata_pass_twine_check(dist: Path) -> None:
    files = sorted(str(path) for path in dist.iterdir())
    assert any(f.endswith(".whl") for f in files) and any(f.endswith(".tar.gz") for f in files), files
    run([sys.executable, "-m", "twine", "check", "--strict", *files])


def test_the_wheel_ships_the_start_up_hook_and_py_typed(dist: Path) -> None:
    [wheel] = dist.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"otel_handoff/py.typed", "otel_handoff_auto.pth", "otel_handoff/cli/offline/livekit.py"} <= names
    assert not any(name.startswith("tests/") for name in names)


def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_demo(dist: Path, tmp_path: Path) -> None:
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "pip"), "install", "--quiet", f"{wheel}[livekit]"], timeout=900)
    demo = run([str(venv / "bin" / "otel-handoff"), "demo"], cwd=tmp_path)
    assert "triage → billing" in demo.stdout
    # a user who installed from a file or the index is told to install from the index
    missing = subprocess.run(
        [str(venv / "bin" / "otel-handoff"), "demo", "--framework", "ag2"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "pip install 'otel-handoff[ag2]'" in missing.stderr, missing.stderr


def test_the_sdist_builds_a_wheel(dist: Path, tmp_path: Path) -> None:
    [sdist] = dist.glob("*.tar.gz")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(tmp_path),
            str(sdist),
        ]
    )
    assert list(tmp_path.glob("otel_handoff-*.whl"))


def test_hints_from_a_checkout_install_from_it(tmp_path: Path) -> None:
    """The test venv has otel-handoff installed editable from this checkout."""
    probe = "from otel_handoff.core.frameworks import BY_KEY; print(BY_KEY['ag2'].install_hint)"
    inside = run([sys.executable, "-c", probe], cwd=ROOT).stdout.strip()
    elsewhere = run([sys.executable, "-c", probe], cwd=tmp_path).stdout.strip()
    assert inside == "pip install -e '.[ag2]'"
    assert elsewhere == f"pip install -e '{ROOT}[ag2]'"
