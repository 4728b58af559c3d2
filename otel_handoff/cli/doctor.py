"""``otel-handoff doctor``: what handoff tracing would do in this environment, and what to fix.

Reads the same settings the start-up hook, the instrumentors and :func:`otel_handoff.configure`
read, builds (but never uses) the exporters they would build, and tries a TCP connection to
each OTLP endpoint. Exit status 1 when something would keep handoffs from being traced or
exported, each problem with a one-line fix.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .. import _auto
from ..core.frameworks import ANY_HINT, FRAMEWORKS
from ..version import __version__

_CONNECT_TIMEOUT = 2.0


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (problem, fix)

    def say(self, text: str) -> None:
        self.lines.append(text)

    def problem(self, text: str, fix: str) -> None:
        if (text, fix) not in self.problems:  # traces and metrics read the same variables
            self.problems.append((text, fix))

    def render(self) -> str:
        out = [*self.lines, ""]
        if self.problems:
            out.append(f"{len(self.problems)} problem(s):")
            out += [f"  ✗ {problem}\n    fix: {fix}" for problem, fix in self.problems]
        else:
            out.append("No problems found.")
        return "\n".join(out) + "\n"


def _frameworks(report: Report) -> None:
    report.say("Frameworks")
    disabled = _auto.disabled_entry_points()
    found = False
    for framework in FRAMEWORKS:
        version = _auto.installed(framework)
        label = "/".join(framework.distributions)
        if version is None:
            report.say(f"  {label}: not installed")
            continue
        found = True
        instrumentor = _auto.instrumentor_class(framework)()
        wanted = ", ".join(instrumentor.instrumentation_dependencies()) or "the classic autogen package"
        problem = _auto.unsupported(framework, instrumentor)
        if problem is not None:
            report.say(f"  {label} {version}: NOT supported (needs {wanted})")
            report.problem(
                f"{label} {version} is not supported by otel-handoff {__version__}",
                f"{framework.install_hint} (installs a supported release)",
            )
            continue
        state = f"disabled by {_auto.DISABLED_ENV}" if framework.entry_point in disabled else "will be traced"
        report.say(
            f"  {label} {version}: supported ({wanted}; tested: {framework.tested}); "
            f"entry point {framework.entry_point}: {state}"
        )
    if not found:
        report.problem("no supported framework is installed", ANY_HINT)


def _start_up_hook() -> Path | None:
    import site

    for directory in [*site.getsitepackages(), site.getusersitepackages()]:
        path = Path(directory) / "otel_handoff_auto.pth"
        if path.exists():
            return path
    return None


def _auto_instrumentation(report: Report) -> None:
    report.say("Auto-instrumentation")
    value = os.environ.get(_auto.ENV)
    wanted = _auto.requested()
    hook = _start_up_hook()
    shown = "unset" if value is None else f"{value!r}"
    if wanted is None:
        report.say(f"  {_auto.ENV}={shown}: not understood")
        report.problem(
            f"{_auto.ENV}={shown} is not understood", f"set {_auto.ENV}=true (or 1, yes) or unset it"
        )
    elif wanted:
        report.say(f"  {_auto.ENV}={shown}: on (start-up hook: {hook or 'MISSING'})")
        if hook is None:
            report.problem(
                "the start-up hook otel_handoff_auto.pth is not installed in this Python",
                "pip install --force-reinstall otel-handoff (in the environment the agent runs in)",
            )
    else:
        report.say(f"  {_auto.ENV}={shown}: off (instrument in code, or run under opentelemetry-instrument)")


def _answers(endpoint: str) -> str | None:
    """None when a TCP connection to the endpoint succeeds, else why not."""
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=_CONNECT_TIMEOUT):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _export(report: Report) -> None:
    from opentelemetry import trace

    from .. import export

    report.say("Export")
    if export.sdk_disabled():
        report.say("  OTEL_SDK_DISABLED=true: nothing is exported")
        return
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        report.say(
            "  provider: the app installs none here; configure() creates an SDK TracerProvider "
            "with a BatchSpanProcessor (and a MeterProvider)"
        )
    else:
        report.say(f"  provider: {type(provider).__module__}.{type(provider).__name__} (kept as is)")
    report.say(f"  service.name: {export.resource(None).attributes.get('service.name')}")

    spans_out, metrics_out = export.exporters(log=False)  # the problems are this report's
    exporters = {"traces": spans_out, "metrics": metrics_out}
    for found in export.problems():  # one line each: the variable, what it accepts
        report.problem(f"{found.variable} {found.problem}", found.accepted)
    for signal, built in exporters.items():
        if not built:
            report.say(f"  {signal}: no exporter (nothing will be sent)")
        for description, exporter in built:
            kind, _, endpoint = description.partition(" ")
            if endpoint.startswith(("http://", "https://")):
                why = _answers(endpoint)
                state = "answers" if why is None else f"does not answer ({why})"
                report.say(f"  {signal}: {kind} -> {endpoint}: {state}")
                if why is not None and signal == "traces":
                    report.problem(
                        f"the OTLP endpoint {endpoint} does not answer ({why})",
                        "start the collector there, or point OTEL_EXPORTER_OTLP_ENDPOINT at one that runs",
                    )
            else:
                report.say(f"  {signal}: {description}")
            exporter.shutdown()


def diagnose() -> Report:
    report = Report()
    report.say(f"otel-handoff {__version__} · Python {sys.version.split()[0]} · {sys.executable}")
    _frameworks(report)
    _auto_instrumentation(report)
    _export(report)
    return report


def main() -> int:
    report = diagnose()
    sys.stdout.write(report.render())
    return 1 if report.problems else 0
