"""What every otel-handoff instrumentor shares on top of contrib's ``BaseInstrumentor``."""

from __future__ import annotations

import importlib
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from ..version import __version__
from . import schema as sc
from .metrics import HandoffMetrics

SCHEMA_URL = "https://opentelemetry.io/schemas/1.28.0"


class HandoffInstrumentor(BaseInstrumentor):
    """Counts as instrumented only when ``_instrument()`` wrapped something.

    ``opentelemetry-instrument`` calls every entry point of an installed distribution, and a
    framework may be absent or refused: then nothing is wrapped, and a later ``instrument()``
    (once the framework is there) must not be turned away as "already instrumented".
    """

    # (module, name, ...) of every wrap point in place, set by ``_instrument``
    _wrapped: tuple[tuple[Any, ...], ...] = ()

    def instrument(self, **kwargs: Any) -> Any:
        result = super().instrument(**kwargs)
        if not type(self)._wrapped:
            self._is_instrumented_by_opentelemetry = False
        return result

    @staticmethod
    def telemetry_parts(scope: str, kwargs: dict[str, Any]) -> tuple[trace.Tracer, HandoffMetrics]:
        """The tracer and metrics of an instrumentor's ``scope``, on the providers passed, if any."""
        tracer = trace.get_tracer(
            scope, __version__, tracer_provider=kwargs.get("tracer_provider"), schema_url=SCHEMA_URL
        )
        return tracer, HandoffMetrics(kwargs.get("meter_provider"), scope)

    @staticmethod
    def static_attributes(framework: str, version: str) -> dict[str, Any]:
        """What every ``agent_handoff`` span of a framework carries."""
        return {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_HANDOFF,
            sc.FRAMEWORK: framework,
            sc.FRAMEWORK_VERSION: version,
        }


def resolve(module: str, name: str) -> tuple[Any, str]:
    """(owner, attribute) of "Class.method" or "function" in ``module``."""
    owner_name, _, attr = name.rpartition(".")
    target: Any = importlib.import_module(module)
    return (getattr(target, owner_name) if owner_name else target), attr


def missing_wrap_points(points: list[tuple[str, str, Any]]) -> list[str]:
    """Wrap points this release does not have: then none of them is wrapped (all or nothing)."""
    missing = []
    for module, name, _ in points:
        try:
            owner, attr = resolve(module, name)
            if not callable(getattr(owner, attr, None)):
                missing.append(f"{module}.{name}")
        except (ImportError, AttributeError):
            missing.append(f"{module}.{name}")
    return missing
