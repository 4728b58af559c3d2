"""``OTEL_HANDOFF_AUTO_INSTRUMENT=true``: handoff tracing for an agent nobody edits.

``otel_handoff_auto.pth`` (installed at the root of site-packages) imports this module at
interpreter start only when the variable is set to something other than a false value, so an
unset variable costs one ``os.environ`` read. :func:`start` then registers wrapt post-import
hooks: each framework is instrumented when it is first imported, before or after any user code,
and exporting is configured from the standard ``OTEL_*`` variables when the first session or
chat starts — late enough for an application that installs its own provider to have done so —
or, in a LiveKit job process (or job thread), once the app's prewarm has run, before a job is
assigned, off the job's event loop, which carries the call; or, in a process that serves with
uvicorn (Pipecat's development runner, a FastAPI app), once the server has started (its lifespan
start-up run), before its first request: the app's own spans (FastAPI's, of each request) are
exported from the first one.

Never raises at start-up: a bad value, a missing or unsupported framework each give one warning
line and the app runs uninstrumented.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import sys
from typing import Any

from .core.frameworks import FRAMEWORKS, Framework, any_hint

ENV = "OTEL_HANDOFF_AUTO_INSTRUMENT"
TRUE_VALUES = ("true", "1", "yes")
FALSE_VALUES = ("", "false", "0", "no", "off")
DISABLED_ENV = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"  # the opentelemetry-instrument convention
# present when `opentelemetry-instrument` runs the process: it loads our entry points itself
_OTEL_INSTRUMENT_MODULE = "opentelemetry.instrumentation.auto_instrumentation"

_LOG = logging.getLogger("otel_handoff")


def requested() -> bool | None:
    """True/False for a valid value of the variable, None for one that is not understood."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in TRUE_VALUES:
        return True
    if value in FALSE_VALUES:
        return False
    return None


def disabled_entry_points() -> set[str]:
    return {name.strip() for name in os.environ.get(DISABLED_ENV, "").split(",") if name.strip()}


_started = False


def start() -> None:
    """Called by the .pth hook at interpreter start; never raises, runs once.

    Once: a venv's ``lib64`` symlink makes ``site`` process the same .pth file twice.
    """
    global _started
    if _started:
        return
    _started = True
    try:
        wanted = requested()
        if wanted is None:
            _LOG.warning(
                "otel-handoff: %s=%r is not understood; use true, 1 or yes (or unset it). "
                "Handoffs are not traced.",
                ENV,
                os.environ.get(ENV),
            )
            return
        if not wanted:
            return
        import wrapt

        if not any(installed(framework) for framework in FRAMEWORKS):
            _LOG.warning(
                "otel-handoff: %s is set but no supported framework is installed; %s. Nothing is traced.",
                ENV,
                any_hint(),
            )
            return
        skipped = disabled_entry_points()
        for framework in FRAMEWORKS:
            if framework.entry_point in skipped:
                _LOG.debug("otel-handoff: %s disabled by %s", framework.entry_point, DISABLED_ENV)
                continue
            for module in framework.modules:
                wrapt.register_post_import_hook(functools.partial(_on_import, framework), module)
    except Exception as exc:
        from .export.credentials import redact  # only now: the start-up hook imports nothing it needn't

        why = redact(str(exc))
        _LOG.warning("otel-handoff: auto-instrumentation could not start (%s: %s)", type(exc).__name__, why)


def installed(framework: Framework) -> str | None:
    """Version of the installed distribution of ``framework``, read without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    for distribution in framework.distributions:
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    return None


def instrumentor_class(framework: Framework) -> Any:
    module, _, name = framework.instrumentor.partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def unsupported(framework: Framework, instrumentor: Any) -> str | None:
    """One line saying why the installed framework cannot be instrumented, or None."""
    from opentelemetry.instrumentation.dependencies import get_dependency_conflicts

    conflict = get_dependency_conflicts(instrumentor.instrumentation_dependencies())
    if conflict is None:
        return None
    return (
        f"otel-handoff: {conflict}; handoffs are not traced. "
        f"Install a supported release: {framework.install_hint}"
    )


_handled: set[str] = set()  # entry points whose hook ran (or is running)


def _on_import(framework: Framework, module: Any) -> None:
    """Post-import hook: instrument the framework just imported, configure export lazily.

    Once per framework, even re-entered: ``instrument()`` imports the framework's other modules
    (the classic ``autogen`` beside ``ag2.network``), whose own hooks then fire inside it.
    """
    if framework.entry_point in _handled:
        return
    _handled.add(framework.entry_point)
    try:
        if _OTEL_INSTRUMENT_MODULE in sys.modules:
            return  # opentelemetry-instrument loads the entry points (and honours its own settings)
        instrumentor = instrumentor_class(framework)()
        if instrumentor.is_instrumented_by_opentelemetry:
            return
        problem = unsupported(framework, instrumentor)
        if problem is not None:
            _LOG.warning(problem)
            return
        instrumentor.instrument()
        _configure_when_started(framework)
        _configure_when_serving()
    except Exception as exc:
        from .core.faults import report

        report(f"auto-instrumentation of {framework.entry_point}", exc)


def _configure_when_started(framework: Framework) -> None:
    from wrapt import wrap_function_wrapper

    points = [(*p, _configure_then_call) for p in framework.starts_at]
    points += [(*p, _call_then_configure) for p in framework.ready_at]
    for module, name, wrapper in points:
        try:
            owner = importlib.import_module(module)
            # a class the module defines, never one its `__getattr__` serves (a deprecated alias
            # warns, and is the class another point names)
            if name.partition(".")[0] not in vars(owner):
                raise AttributeError(name)
            wrap_function_wrapper(owner, name, wrapper)
        except (ImportError, AttributeError):
            _LOG.debug("otel-handoff: no %s.%s to configure exporting at", module, name)


_SERVER = {"hooked": False}


def _configure_when_serving() -> None:
    """Once uvicorn's server has started (a framework of ours is in use): configure exporting."""
    if _SERVER["hooked"]:
        return
    _SERVER["hooked"] = True
    import wrapt

    wrapt.register_post_import_hook(_wrap_server_startup, "uvicorn.server")


def _wrap_server_startup(module: Any) -> None:
    from wrapt import wrap_function_wrapper

    try:
        wrap_function_wrapper(module, "Server.startup", _configure_after_startup)
    except AttributeError:
        _LOG.debug("otel-handoff: no uvicorn Server.startup to configure exporting at")


async def _configure_after_startup(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The server's start-up (the app's lifespan start-up among it), then exporting, unless the app
    installed a provider: before the first request is served (one loop, no await between)."""
    result = await wrapped(*args, **kwargs)
    from . import configure

    configure(instrument=False)  # idempotent; never replaces an application's provider; never raises
    return result


def _configure_then_call(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The first session or chat: set up exporting unless the app installed a provider."""
    from .core.faults import guard

    guard("export set-up at the first session", _configure_export)
    return wrapped(*args, **kwargs)


def _call_then_configure(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """A process readied for sessions (the app's own set-up first, so a provider it installs
    there is kept): set up exporting now, off any session's event loop."""
    result = wrapped(*args, **kwargs)
    from .core.faults import guard

    guard("export set-up in a readied process", _configure_export)
    return result


def _configure_export() -> None:
    from . import configure

    configure(instrument=False)  # idempotent; never replaces an application's provider
