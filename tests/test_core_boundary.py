"""Core stands alone: no module under ``otel_handoff/core/`` imports from ``export/`` or ``cli/``.

The instrumentors run under ``opentelemetry-instrument`` and the start-up hook without
``configure()``; what they read (a setting, a reporter) must be core's own, or ``export/`` and the
command line would be imported, and read, behind the app's back. Every import is found, a
function's own included, by parsing the source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "otel_handoff" / "core"
FORBIDDEN = ("otel_handoff.export", "otel_handoff.cli")


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in ``source``, at any depth, relative ones resolved
    against ``package``; ``from X import y`` yields ``X`` and ``X.y`` (y may be a module)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def crossings(source: str, package: str = "otel_handoff.core") -> list[str]:
    return [
        f"line {line}: {module}"
        for line, module in sorted(imported_modules(source, package))
        if any(module == forbidden or module.startswith(f"{forbidden}.") for forbidden in FORBIDDEN)
    ]


def test_no_core_module_imports_export_or_cli() -> None:
    found = {}
    for path in sorted(CORE.rglob("*.py")):
        package = ".".join(path.relative_to(CORE.parents[1]).parent.parts)
        if problems := crossings(path.read_text(encoding="utf-8"), package):
            found[str(path.relative_to(CORE.parents[1]))] = problems
    assert found == {}


def test_the_check_sees_every_kind_of_import() -> None:
    """A function-level, a relative, a parent-relative and a string import are all caught."""
    source = """
import otel_handoff.cli.doctor
from otel_handoff.export import configure
from .. import export
from . import schema

def late():
    from ..export.settings import phase_metrics
    import importlib
    importlib.import_module("otel_handoff.cli")
"""
    assert crossings(source) == [
        "line 2: otel_handoff.cli.doctor",
        "line 3: otel_handoff.export",
        "line 3: otel_handoff.export.configure",
        "line 4: otel_handoff.export",
        "line 8: otel_handoff.export.settings",
        "line 8: otel_handoff.export.settings.phase_metrics",
        "line 10: otel_handoff.cli",
    ]
