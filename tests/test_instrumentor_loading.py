"""How the instrumentors load: an absent framework is no problem, wrapping nothing is not 'instrumented'."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from otel_handoff.ag2 import AG2HandoffInstrumentor
from otel_handoff.ag2 import _features as ag2_features
from otel_handoff.livekit import LiveKitHandoffInstrumentor


@pytest.fixture
def no_ag2(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a process where neither AG2 is installed (what `opentelemetry-instrument` meets)."""
    monkeypatch.setattr(ag2_features, "detect", lambda: None)
    monkeypatch.setattr(ag2_features, "network_version", lambda: None)


def test_absent_framework_is_silent_and_not_instrumented(
    no_ag2: None, provider: Any, caplog: pytest.LogCaptureFixture
) -> None:
    instrumentor = AG2HandoffInstrumentor()
    with caplog.at_level(logging.DEBUG, logger="otel_handoff"):
        # what opentelemetry-instrument does for every entry point of an installed distribution
        instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    assert not instrumentor.is_instrumented_by_opentelemetry
    instrumentor.uninstrument()  # stop waiting for ag2's import, which a later test makes


def test_instrument_after_wrapping_nothing_is_not_turned_away(
    provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("ag2.network")  # the app has imported its framework (else instrument() waits)
    instrumentor = AG2HandoffInstrumentor()
    with monkeypatch.context() as absent:
        absent.setattr(ag2_features, "detect", lambda: None)
        absent.setattr(ag2_features, "network_version", lambda: None)
        instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
    # the framework is there now: instrument() does its work instead of "already instrumented"
    with caplog.at_level(logging.WARNING):
        instrumentor.instrument(tracer_provider=provider)
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        assert not any("already instrumented" in r.getMessage() for r in caplog.records)
    finally:
        instrumentor.uninstrument()


def test_a_release_missing_a_wrap_point_is_left_alone(
    provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """All or nothing: one error line naming what is missing and the tested range, no patch."""
    pytest.importorskip("ag2.network")
    from ag2.network.adapters.workflow import WorkflowAdapter

    monkeypatch.setattr(ag2_features, "detect", lambda: None)  # the classic part is tested elsewhere
    monkeypatch.delattr(WorkflowAdapter, "fold")
    instrumentor = AG2HandoffInstrumentor()
    with caplog.at_level(logging.ERROR, logger="otel_handoff"):
        instrumentor.instrument(tracer_provider=provider)
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "WorkflowAdapter.fold" in record.getMessage() and "1.0.0 to 1.2.1" in record.getMessage()
    assert not instrumentor.is_instrumented_by_opentelemetry
    from ag2.network.hub.core import Hub
    from wrapt import FunctionWrapper

    assert not isinstance(vars(Hub)["__init__"], FunctionWrapper)


def test_newer_untested_release_is_instrumented_with_one_info_line(
    provider: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("livekit.agents")
    from otel_handoff.livekit import _features as lk_features

    detect = lk_features.detect

    def from_the_future() -> Any:
        import dataclasses

        return dataclasses.replace(detect(), version="9.0.0")

    monkeypatch.setattr(lk_features, "detect", from_the_future)
    instrumentor = LiveKitHandoffInstrumentor()
    with caplog.at_level(logging.INFO, logger="otel_handoff"):
        instrumentor.instrument(tracer_provider=provider)
    try:
        assert instrumentor.is_instrumented_by_opentelemetry
        (line,) = [
            r.getMessage() for r in caplog.records if "newer than the releases tested" in r.getMessage()
        ]
        assert "9.0.0" in line and "1.2.18 to 1.8.9" in line
    finally:
        instrumentor.uninstrument()


def test_the_framework_registry_matches_pyproject() -> None:
    """One registry (entry point, instrumentor, extra, requirements) and the package's metadata agree."""
    tomllib = pytest.importorskip("tomllib")
    import importlib
    from pathlib import Path

    from otel_handoff.core.frameworks import FRAMEWORKS

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    entry_points = project["entry-points"]["opentelemetry_instrumentor"]
    extras = project["optional-dependencies"]
    assert entry_points == {f.entry_point: f.instrumentor for f in FRAMEWORKS}
    for framework in FRAMEWORKS:
        assert tuple(extras[framework.extra]) == (*framework.extra_requires, *framework.extra_bounds)
        module = framework.instrumentor.partition(":")[0]
        package = importlib.import_module(f"{module}.package")
        declared = (*package._instruments, *getattr(package, "_instruments_any", ()))
        assert {r.replace(" ", "") for r in declared} == set(framework.instruments)
    assert sorted(extras["instruments-any"]) == sorted(r for f in FRAMEWORKS for r in f.instruments)
    # installed from this checkout (the test venv): the hint installs from it, not the index
    assert all(f"[{f.extra}]'" in f.install_hint for f in FRAMEWORKS)


def test_every_instrumentor_declares_what_the_skeleton_reads() -> None:
    """Each registered instrumentor (or each of its parts) names its release, what a refusal leaves
    untraced and the releases tested, and builds its telemetry and wrap points: the skeleton
    (``HandoffInstrumentor``) does the rest."""
    import importlib

    from otel_handoff.core.frameworks import FRAMEWORKS
    from otel_handoff.core.instrumentor import HandoffInstrumentor

    for framework in FRAMEWORKS:
        module, _, name = framework.instrumentor.partition(":")
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, HandoffInstrumentor), name
        for part in cls.parts or (cls,):
            instrumentor = part()
            for attribute in ("release", "untraced", "tested", "newest_tested"):
                assert isinstance(getattr(instrumentor, attribute), str), (part.__name__, attribute)
            for hook in ("make_telemetry", "wrap_points"):
                assert getattr(part, hook) is not getattr(HandoffInstrumentor, hook), (part.__name__, hook)
