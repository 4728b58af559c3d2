"""The instrumentor skeleton every framework package fills in, on top of contrib's ``BaseInstrumentor``."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import logging
import sys
from collections.abc import Callable, Collection
from types import ModuleType
from typing import Any, ClassVar, NamedTuple

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.instrumentation.utils import unwrap
from packaging.version import Version
from wrapt import register_post_import_hook, wrap_function_wrapper

from ..version import __version__
from . import delivery
from . import schema as sc
from .faults import report
from .frameworks import FRAMEWORKS, Framework
from .metrics import HandoffMetrics
from .settings import phase_metrics
from .spans import HandoffTelemetry, end_open_roots

# (module, "Class.method" or "function", wrapper)
WrapPoint = tuple[str, str, Any]

SCHEMA_URL = "https://opentelemetry.io/schemas/1.28.0"
METER_SCOPE = "otel_handoff"  # one meter for every framework's handoff metrics


_NO_SDK_WARNED: list[bool] = []
# what `opentelemetry-instrument` imports (its sitecustomize) before it loads the instrumentors
_AUTO_INSTRUMENTATION = "opentelemetry.instrumentation.auto_instrumentation"
NO_SDK_UNDER_OPENTELEMETRY_INSTRUMENT = (
    "otel-handoff: opentelemetry-instrument loaded the handoff instrumentation, but no "
    "OpenTelemetry SDK is set up, so nothing will be exported: pip install opentelemetry-distro "
    "(it sets up the SDK from the OTEL_* variables), or set OTEL_HANDOFF_AUTO_INSTRUMENT=true, or "
    "call otel_handoff.configure()"
)


def _framework_of(cls: type) -> Framework:
    """``cls``'s entry of the framework registry (or its nearest registered base class's)."""
    by_instrumentor = {framework.instrumentor: framework for framework in FRAMEWORKS}
    for klass in cls.__mro__:
        framework = by_instrumentor.get(f"{klass.__module__}:{klass.__qualname__}")
        if framework is not None:
            return framework
    raise LookupError(f"{cls.__qualname__} has no entry in otel_handoff.core.frameworks.FRAMEWORKS")


def _installed(modules: tuple[str, ...]) -> bool:
    """Can any of ``modules`` be imported? Found without importing it (its parent package is)."""
    for module in modules:
        try:
            if importlib.util.find_spec(module) is not None:
                return True
        except (ImportError, ValueError):  # its parent package is not installed
            continue
    return False


def _warn_if_nothing_exports() -> None:
    """Under ``opentelemetry-instrument`` without a distro, the SDK is never set up: spans go
    nowhere and nothing says so. One line, once per process, says what to install."""
    if _NO_SDK_WARNED or _AUTO_INSTRUMENTATION not in sys.modules:
        return
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        _NO_SDK_WARNED.append(True)
        logging.getLogger("otel_handoff").warning(NO_SDK_UNDER_OPENTELEMETRY_INSTRUMENT)


class Installed(NamedTuple):
    """What :meth:`HandoffInstrumentor.detect` finds of a framework that needs no more than its version."""

    version: str


class TelemetryParts(NamedTuple):
    """What every framework's telemetry starts with, in ``HandoffTelemetry``'s order."""

    tracer: trace.Tracer
    metrics: HandoffMetrics
    static_attributes: dict[str, Any]


class HandoffInstrumentor(BaseInstrumentor):
    """The instrumentor skeleton: a framework's instrumentor declares only what is its own.

    Declared: ``package`` (its ``package.py``: ``_instruments``, ``TESTED``, ``NEWEST_TESTED``),
    ``release`` (the distribution as log lines name it), ``untraced`` (what a refused release leaves
    untraced), :meth:`make_telemetry` and :meth:`wrap_points`; where needed :meth:`detect`,
    :meth:`missing`, :meth:`after_instrument`, :meth:`before_uninstrument`. Its registry entry
    (``core/frameworks.py``) says which modules mean it is installed and what its spans call it.

    Counts as instrumented only when something was wrapped: ``opentelemetry-instrument`` calls
    every entry point of an installed distribution, and a framework may be absent or refused; a
    later ``instrument()`` (once the framework is there) must not be turned away as "already
    instrumented".
    """

    package: ModuleType  # its package.py; a class attribute, as those below
    release: ClassVar[str]  # "livekit-agents"
    untraced: ClassVar[str]  # "handoffs are"
    # releases traced apart, each all or nothing, under one instrumentor (AG2's classic group chats
    # and its workflow channels): each declared as an instrumentor of its own
    parts: ClassVar[tuple[type[HandoffInstrumentor], ...]] = ()

    # the telemetry of what is instrumented, kept for uninstrument()
    _telemetry: Any = None
    # (module, name, defined on the owner itself rather than inherited) of every wrap point in place
    _wrapped: tuple[tuple[str, str, bool], ...] = ()
    # set while instrumentation waits for the app to import the framework (see instrument())
    _pending: object | None = None

    @property
    def tested(self) -> str:
        """The releases the version matrix passes, named in log lines."""
        return self.package.TESTED

    @property
    def newest_tested(self) -> str:
        """Newer releases are instrumented with one info line."""
        return self.package.NEWEST_TESTED

    # --- what a framework declares ---------------------------------------------------------

    def instrumentation_dependencies(self) -> Collection[str]:
        return self.package._instruments

    def detect(self) -> Any:
        """What the installed release offers, read once: its features with their ``version``, or
        :class:`Installed`; None when it is not installed."""
        return Installed(importlib.metadata.version(self.release))

    def missing(self) -> list[str]:
        """What the release lacks of what the wrappers rely on beside the wrap points (its shapes).
        Anything, or a module or class it reads gone: nothing is wrapped (all or nothing)."""
        return []

    def make_telemetry(self, parts: TelemetryParts, features: Any) -> HandoffTelemetry:
        """What the framework's wrappers share, built from ``parts`` and :meth:`detect`'s features."""
        raise NotImplementedError

    def wrap_points(self, telemetry: Any) -> list[WrapPoint]:
        """Every (module, "Class.method" or "function", wrapper) to wrap, all or none."""
        raise NotImplementedError

    def after_instrument(self, telemetry: Any) -> None:
        """Extras once every point is wrapped (a log filter, a hook on a later import)."""

    def before_uninstrument(self, telemetry: Any) -> None:
        """Undo the extras and let go of what is open; ``telemetry.enabled`` is False already."""

    # --- the skeleton ----------------------------------------------------------------------

    def instrument(self, **kwargs: Any) -> Any:
        """Instrument now if the app has imported the framework, else when it does.

        ``configure()``, ``opentelemetry-instrument`` and the variable instrument every installed
        framework; importing each (seconds of start-up, their banners) for an app that uses one
        would be ours to pay. A post-import hook (wrapt's) waits for the app's own import instead.
        """
        modules = _framework_of(type(self)).modules
        if not any(module in sys.modules for module in modules):
            self._instrument_when_imported(modules, kwargs)
            return None
        result = super().instrument(**kwargs)
        if not type(self)._in_place():
            self._is_instrumented_by_opentelemetry = False
            return result
        delivery.instrumented(type(self))  # a uvicorn server's end flushes, while we are in place
        if "tracer_provider" not in kwargs:
            _warn_if_nothing_exports()
        return result

    @classmethod
    def _in_place(cls) -> bool:
        """Is anything of ours in place (wrap points; an instrumentor observing through a hook
        of the framework's says so itself)?"""
        return bool(cls._wrapped) or any(part._in_place() for part in cls.parts)

    def _instrument_when_imported(self, modules: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        cls = type(self)
        if cls._pending is not None:
            return  # already waiting
        token = cls._pending = object()

        def on_import(_: Any) -> None:
            if cls._pending is not token:
                return  # uninstrumented meanwhile, or another of the framework's modules came first
            cls._pending = None
            try:
                self.instrument(**kwargs)
            except Exception as exc:  # the app's import goes on
                report(f"instrumenting {cls.__name__} on import", exc)

        for module in modules:
            register_post_import_hook(on_import, module)

    def _instrument(self, **kwargs: Any) -> None:
        framework = _framework_of(type(self))
        if not _installed(framework.modules):
            return  # not installed (opentelemetry-instrument calls every entry point): not a problem
        scope = type(self).__module__  # the framework's package
        # made once, when the first release passes its checks; the parts share it
        tracer_and_metrics = functools.cache(functools.partial(self.telemetry_parts, scope, kwargs))
        for instrumentor in [part() for part in self.parts] or [self]:
            instrumentor._instrument_release(framework, tracer_and_metrics)

    def _instrument_release(
        self, framework: Framework, tracer_and_metrics: Callable[[], tuple[trace.Tracer, HandoffMetrics]]
    ) -> None:
        # every check of the release, before anything is patched: one that fails in any way (a
        # module that raises on import, an install without sources, a release that moved
        # something) refuses it with one line, and never raises into the app
        try:
            features = self.detect()
            if features is None or self._refused(features.version):
                return
            attributes = self.static_attributes(framework.span_framework, features.version)
            telemetry = self.make_telemetry(TelemetryParts(*tracer_and_metrics(), attributes), features)
            points = self.wrap_points(telemetry)
        except Exception as exc:
            self._refuse_unchecked(exc)
            return
        if self._wrap_all(points, features.version):
            type(self)._telemetry = telemetry
            self.after_instrument(telemetry)

    def uninstrument(self, **kwargs: Any) -> Any:
        if type(self)._pending is not None:  # never instrumented: only stop waiting
            type(self)._pending = None
            return None
        result = super().uninstrument(**kwargs)
        end_open_roots(_framework_of(type(self)).span_framework)  # nothing of ours stays open
        delivery.uninstrumented(type(self))
        return result

    def _uninstrument(self, **kwargs: Any) -> None:
        for part in self.parts:
            part()._uninstrument()
        cls = type(self)
        telemetry = cls._telemetry
        if telemetry is not None:
            telemetry.enabled = False  # a wrapper still referenced somewhere now passes straight through
            self.before_uninstrument(telemetry)
            # classes only known at run time, wrapped on first sight (wrap_where_defined)
            unwrap_each(getattr(telemetry, "lazily_wrapped", []))
        self.unwrap_all()
        cls._telemetry = None

    def _wrap_all(self, points: list[WrapPoint], version: str) -> bool:
        """Wrap every point or none (all or nothing); one log line when refused or untested.

        A method a class inherits is wrapped on that class only, and removed again (not pinned) by
        :meth:`unwrap_all`.
        """
        missing = missing_wrap_points(points)
        if missing:
            self._refuse(version, missing)
            return False
        done: list[tuple[str, str, bool]] = []
        try:
            for module, name, wrapper in points:
                owner, attr = resolve(module, name)
                own = attr in vars(owner)
                wrap_function_wrapper(owner, attr, wrapper)
                done.append((module, name, own))
        except Exception as exc:  # a wrap point that looked right but is not: nothing stays patched
            _unwrap(done)
            report("instrument()", exc)
            return False
        type(self)._wrapped += tuple(done)
        if Version(version) > Version(self.newest_tested):
            logging.getLogger(type(self).__module__).info(
                "otel-handoff: %s %s is newer than the releases tested (%s); every wrap point and "
                "feature check held, so it is instrumented.",
                self.release,
                version,
                self.tested,
            )
        return True

    def _refused(self, version: str) -> bool:
        """Refuse when :meth:`missing` finds anything, or a module or class it reads moved."""
        try:
            missing = self.missing()
        except (ImportError, AttributeError) as exc:
            missing = [str(getattr(exc, "name", None) or exc)]
        if missing:
            self._refuse(version, missing)
        return bool(missing)

    def _refuse_unchecked(self, exc: Exception) -> None:
        """The one line saying a release could not be checked, so it is left alone."""
        try:
            version = importlib.metadata.version(self.release)
        except Exception:
            version = "(version unknown)"
        logging.getLogger(type(self).__module__).error(
            "otel-handoff: %s %s could not be checked (%s: %s); %s not traced. Install a tested "
            "release (%s), or report it with your otel-handoff and framework versions.",
            self.release,
            version,
            type(exc).__name__,
            _one_line(exc),
            self.untraced,
            self.tested,
        )

    def _refuse(self, version: str, missing: list[str]) -> None:
        """The one line saying a release lacks what we wrap, so it is left alone."""
        logging.getLogger(type(self).__module__).error(
            "otel-handoff: %s %s lacks %s; %s not traced. Install a tested release (%s).",
            self.release,
            version,
            ", ".join(missing),
            self.untraced,
            self.tested,
        )

    def unwrap_all(self) -> None:
        """Undo every wrap point :meth:`_wrap_all` put in place."""
        cls = type(self)
        wrapped, cls._wrapped = cls._wrapped, ()
        _unwrap(wrapped)

    @staticmethod
    def telemetry_parts(scope: str, kwargs: dict[str, Any]) -> tuple[trace.Tracer, HandoffMetrics]:
        """The tracer of an instrumentor's ``scope`` and the metrics, on the providers passed, if any;
        per-phase metric points unless ``phase_metrics=False`` (or ``OTEL_HANDOFF_PHASE_METRICS``).

        The metrics of every framework share one meter (``METER_SCOPE``): each metric then has one
        set of attribute keys across frameworks, which the SDK's Prometheus exporter needs (it
        reuses a metric family made for one scope's keys for another scope's points, misaligning
        the labels, opentelemetry-exporter-prometheus 0.66b2). ``agent_handoff.framework`` says
        which framework a point is from.
        """
        provider = kwargs.get("tracer_provider")
        tracer = trace.get_tracer(scope, __version__, tracer_provider=provider, schema_url=SCHEMA_URL)
        delivery.remember(tracer, provider)  # flushed when a conversation ends, and at the process's end
        phases = kwargs.get("phase_metrics")
        if phases is None:
            phases = phase_metrics()
        return tracer, HandoffMetrics(kwargs.get("meter_provider"), METER_SCOPE, phases=bool(phases))

    @staticmethod
    def static_attributes(framework: str, version: str) -> dict[str, Any]:
        """What every ``agent_handoff`` span of a framework carries."""
        return {
            sc.GEN_AI_OPERATION_NAME: sc.OPERATION_HANDOFF,
            sc.FRAMEWORK: framework,
            sc.FRAMEWORK_VERSION: version,
        }


def _one_line(exc: BaseException) -> str:
    """An exception's message, on one line and short (a log line, not a traceback)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:199] + "…"


def resolve(module: str, name: str) -> tuple[Any, str]:
    """(owner, attribute) of "Class.method", "Class.Nested.method" or "function" in ``module``."""
    owner_name, _, attr = name.rpartition(".")
    target: Any = importlib.import_module(module)
    for part in owner_name.split(".") if owner_name else ():
        target = getattr(target, part)
    return target, attr


def _unwrap(wrapped: Any) -> None:
    for module, name, own in wrapped:
        owner, attr = resolve(module, name)
        if own:
            unwrap(owner, attr)
        else:
            delattr(owner, attr)  # was inherited: drop our override rather than pin a copy


def wrap_where_defined(
    cls: type,
    name: str,
    make_wrapper: Any,
    wrapped: list[tuple[type, str]],
    *,
    unless: type | None = None,
) -> None:
    """Wrap method ``name`` of ``cls`` on the class of its MRO that defines it, once; note it.

    For classes only known at run time (a plugin's realtime session, a hub subclass, an app's
    realtime model): ``make_wrapper(original)`` gives the wrapper; nothing happens when we wrapped
    it there already or it is defined on ``unless`` (wrapped as a wrap point already). Another
    instrumentation's wrapper is wrapped in turn. :func:`unwrap_each` undoes what ``wrapped`` noted.
    """
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    if owner is None or owner is unless or (owner, name) in wrapped:
        return
    wrap_function_wrapper(owner, name, make_wrapper(vars(owner)[name]))
    wrapped.append((owner, name))


def unwrap_each(wrapped: list[tuple[type, str]]) -> None:
    """Undo every :func:`wrap_where_defined` noted in ``wrapped``."""
    for owner, name in wrapped:
        unwrap(owner, name)
    wrapped.clear()


def missing_wrap_points(points: list[WrapPoint]) -> list[str]:
    """Wrap points this release does not have: then none of them is wrapped (all or nothing)."""
    missing = []
    for module, name, _ in points:
        try:
            owner, attr = resolve(module, name)
            if not callable(getattr(owner, attr, None)):
                missing.append(f"{module}.{name}")
        except Exception:  # not importable (in any way), or not there
            missing.append(f"{module}.{name}")
    return missing
