"""``otel-handoff doctor``: what handoff tracing would do in this environment, and what to fix.

Reads the same settings the start-up hook, the instrumentors and :func:`otel_handoff.configure`
read, builds (but never uses) the exporters they would build, and sends each OTLP endpoint an
empty export request over the configured protocol. Exit status 1 when something would keep
handoffs from being traced or exported, each problem with a one-line fix.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .. import _auto
from ..core.frameworks import BY_KEY, FRAMEWORKS, SHARED_VENV, Framework, any_hint, install_command
from ..core.settings import first_set
from ..export.credentials import redact, split_userinfo
from ..export.file import EXPORTER_NAME, PATH_VARIABLE
from ..export.settings import PROTOCOL_FIX, endpoint_variable, protocol_hint
from ..version import __version__

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
_PROBE_TIMEOUT = 2.0  # seconds a receiver gets to answer an empty export request


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (problem, fix)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (fact, what to do): not a problem

    def say(self, text: str) -> None:
        self.lines.append(text)

    def problem(self, text: str, fix: str) -> None:
        if (text, fix) not in self.problems:  # traces and metrics read the same variables
            self.problems.append((text, fix))

    def note(self, text: str, fix: str) -> None:
        if (text, fix) not in self.notes:
            self.notes.append((text, fix))

    def render(self) -> str:
        out = [*self.lines, ""]
        out += [f"note: {text}\n    {fix}" for text, fix in self.notes]
        if self.problems:
            out.append(f"{len(self.problems)} problem(s):")
            out += [f"  ✗ {problem}\n    fix: {fix}" for problem, fix in self.problems]
        else:
            out.append("No problems found.")
        return redact("\n".join(out)) + "\n"  # an exception's text may quote an endpoint


def _frameworks(report: Report) -> None:
    report.say("Frameworks")
    disabled = _auto.disabled_entry_points()
    found = False
    for framework in FRAMEWORKS:
        version = _auto.installed(framework)
        # the name --framework takes, then the packages
        label = f"{framework.key} ({'/'.join(framework.distributions)}"
        if version is None:
            report.say(f"  {label}): not installed")
            continue
        label = f"{framework.key} ({'/'.join(framework.distributions)} {version})"
        found = True
        instrumentor = _auto.instrumentor_class(framework)()
        wanted = ", ".join(instrumentor.instrumentation_dependencies()) or "the classic autogen package"
        problem = _auto.unsupported(framework, instrumentor)
        if problem is not None:
            report.say(f"  {label}: NOT supported (needs {wanted})")
            report.problem(
                f"{label} is not supported by otel-handoff {__version__}",
                f"{framework.install_hint} (installs a supported release)",
            )
            continue
        state = f"disabled by {_auto.DISABLED_ENV}" if framework.entry_point in disabled else "will be traced"
        report.say(
            f"  {label}: supported ({wanted}; tested: {framework.tested}); "
            f"entry point {framework.entry_point}: {state}"
        )
    if not found:
        report.problem("no supported framework is installed", any_hint())


def _requirements(report: Report) -> None:
    """``pip check`` on otel-handoff and the installed frameworks: pip installs a framework whose
    requirements clash with another's with exit status 0 and leaves one of them broken."""
    from .requirements import check

    report.say("Requirements")
    found = check()
    if not found.unmet:
        report.say(f"  {', '.join(found.roots)}: {found.checked} distributions, every requirement met")
        return
    # two frameworks pinning apart, either way round -> (the side whose need is unmet, its line)
    conflicts: dict[frozenset[str], list[tuple[str, str]]] = {}
    for unmet in found.unmet:
        need = unmet.need
        if unmet.installed is None:
            line = f"{need.requirer} needs {need.wanted}, which is not installed"
        else:
            installed = f"{need.requirement.name} {unmet.installed}"
            line = f"{need.requirer} needs {need.wanted}, but {installed} is installed"
            held = unmet.by_framework or unmet.held_by  # another framework's own pin first
            if held:
                line += f", which {held[0].requirer} needs ({held[0].wanted})"
        report.say(f"  {line}")
        ours, theirs = unmet.frameworks
        if ours and theirs:
            conflicts.setdefault(frozenset((ours[0].key, theirs[0].key)), []).append((ours[0].key, line))
        else:
            report.problem(line, f"pip install '{need.wanted}' (pip then says what else holds it back)")
    order = [framework.key for framework in FRAMEWORKS]
    for pair, sides in conflicts.items():
        # the side pip broke (most needs unmet) stays; the other moves to an environment of its own
        key = max(pair, key=lambda k: (sum(side == k for side, _ in sides), -order.index(k)))
        here, other = BY_KEY[key], BY_KEY[next(k for k in pair if k != key)]
        lines = [line for side, line in sides if side == key]
        # the framework's own requirement says it best (livekit-agents, not an exporter it pulls in)
        shown = next((line for line in lines if line.startswith(tuple(found.roots))), lines[0])
        more = f" (and {len(sides) - 1} more)" if len(sides) > 1 else ""
        venv = other.venv if other.venv != SHARED_VENV else f".venv-{other.key}"
        report.problem(
            f"{here.name} and {other.name} cannot share an environment: {shown}{more}",
            f"one virtual environment per side: {other.name} in its own (python3 -m venv {venv} && "
            f"{venv}/bin/{install_command(other.extra)}); "
            f"here, pip uninstall {' '.join(_installed(other))}, then "
            f"{install_command(here.extra)} again to restore what {here.name} needs",
        )


def _installed(framework: Framework) -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in framework.distributions:
        try:
            version(name)
        except PackageNotFoundError:
            continue
        found.append(name)
    return found


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
    report.say(f"  opentelemetry-instrument: {_sdk_under_opentelemetry_instrument()}")


def _sdk_under_opentelemetry_instrument() -> str:
    """Whether ``opentelemetry-instrument`` would set up an SDK: a configurator (the distro's) must
    be installed, and be the one OTEL_PYTHON_CONFIGURATOR names, if it names one."""
    from importlib.metadata import entry_points

    wanted = os.environ.get("OTEL_PYTHON_CONFIGURATOR")
    found = [ep for ep in entry_points(group="opentelemetry_configurator") if wanted in (None, ep.name)]
    if found:
        return f"sets up the SDK ({found[0].value.split(':')[0]})"
    return (
        "would export nothing, no SDK configurator: pip install opentelemetry-distro to use it "
        f"(or {_auto.ENV}=true, or configure())"
    )


def _probe(signal: str, kind: str, endpoint: str) -> str | None:
    """Send an empty OTLP export request as the exporter would; None when the receiver accepts it.

    A port that opens proves little: a hung collector, a proxy or a full queue accept the
    connection and never answer. Over ``kind`` (``otlp/grpc`` or ``otlp/http/protobuf``),
    with the configured headers, and ``_PROBE_TIMEOUT`` seconds to answer.
    """
    from opentelemetry.sdk import environment_variables as env
    from opentelemetry.util.re import parse_env_headers

    variable = (
        env.OTEL_EXPORTER_OTLP_TRACES_HEADERS
        if signal == "traces"
        else env.OTEL_EXPORTER_OTLP_METRICS_HEADERS
    )
    raw = os.environ.get(variable) or os.environ.get(env.OTEL_EXPORTER_OTLP_HEADERS, "")
    headers = parse_env_headers(raw, liberal=True)
    if kind == "otlp/grpc":
        return _probe_grpc(signal, endpoint, headers)
    return _probe_http(signal, endpoint, headers)


def _probe_http(signal: str, url: str, headers: dict[str, str]) -> str | None:
    import urllib.error
    import urllib.request

    url, basic = split_userinfo(url)  # as the exporter's HTTP client sends it: basic auth
    request = urllib.request.Request(
        url,
        data=_empty_request(signal),
        headers={"Content-Type": "application/x-protobuf", **basic, **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=_PROBE_TIMEOUT) as answer:
            status = answer.status
    except urllib.error.HTTPError as exc:
        return f"answers HTTP {exc.code} {exc.reason} to an export request"
    except TimeoutError:
        return f"accepts connections but sent no answer in {_PROBE_TIMEOUT:g} s"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return f"accepts connections but sent no answer in {_PROBE_TIMEOUT:g} s"
        return getattr(reason, "strerror", None) or str(reason)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None if 200 <= status < 300 else f"answers HTTP {status} to an export request"


def _probe_grpc(signal: str, endpoint: str, headers: dict[str, str]) -> str | None:
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    parts = urlsplit(endpoint)
    target = f"{parts.hostname or 'localhost'}:{parts.port or (443 if parts.scheme == 'https' else 4317)}"
    channel = (
        grpc.secure_channel(target, grpc.ssl_channel_credentials())
        if parts.scheme == "https"
        else grpc.insecure_channel(target)
    )
    stub = (
        trace_service_pb2_grpc.TraceServiceStub(channel)
        if signal == "traces"
        else metrics_service_pb2_grpc.MetricsServiceStub(channel)
    )
    request = _request_class(signal)()
    try:
        stub.Export(request, timeout=_PROBE_TIMEOUT, metadata=[(k.lower(), v) for k, v in headers.items()])
    except grpc.RpcError as exc:
        code = exc.code()
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"accepts connections but sent no answer in {_PROBE_TIMEOUT:g} s"
        if code is grpc.StatusCode.UNAVAILABLE:
            details = " ".join(str(exc.details()).split())
            if protocol_hint(details):
                return _HTTP1
            return (
                "Connection refused" if "Connection refused" in details else f"unavailable ({details[:200]})"
            )
        return f"answers {code.name} to an export request"
    finally:
        channel.close()
    return None


_HTTP1 = "answers in HTTP/1.1, not gRPC: an OTLP/HTTP port"


def _request_class(signal: str) -> type:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ExportTraceServiceRequest if signal == "traces" else ExportMetricsServiceRequest


def _empty_request(signal: str) -> bytes:
    return _request_class(signal)().SerializeToString()


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
    name = str(export.resource(None).attributes.get("service.name"))
    if name.startswith("unknown_service"):  # the SDK's: unknown_service:<the app's interpreter's file name>
        name = (
            "unknown_service:<the app's interpreter> (no OTEL_SERVICE_NAME), e.g. unknown_service:python "
            "for `python agent.py`; set OTEL_SERVICE_NAME to name the agent"
        )
    report.say(f"  service.name: {name}")

    spans_out, metrics_out = export.exporters(log=False)  # the problems are this report's
    exporters = {"traces": spans_out, "metrics": metrics_out}
    from ..export.settings import PHASE_METRICS, phase_metrics

    phases = "on" if phase_metrics() else f"off ({PHASE_METRICS}=false)"
    report.say(f"  per-phase metric points (agent_handoff.phase.duration): {phases}")
    for found in export.problems():  # one line each: the variable, what it accepts
        report.problem(f"{found.variable} {found.problem}", found.accepted)
    unreachable: set[str] = set()  # receivers whose traces already failed: one problem each
    for signal, built in exporters.items():
        if not built:
            report.say(f"  {signal}: no exporter (nothing will be sent)")
        for description, exporter in built:
            kind, _, shown = description.partition(" ")  # the endpoint, its credentials redacted
            endpoint = getattr(exporter, "endpoint", shown)
            if endpoint.startswith(("http://", "https://")):
                why = _probe(signal, kind, endpoint)
                state = "answers" if why is None else why if why == _HTTP1 else f"does not answer ({why})"
                report.say(f"  {signal}: {kind} -> {shown}: {state}")
                receiver = urlsplit(endpoint).netloc
                if why is not None and not first_set(endpoint_variable(signal)):
                    # the SDK's default endpoint, which nobody set: the demo runs without it
                    report.note(
                        f"no OTLP endpoint is set and nothing answers at the default {shown}: "
                        "the app's spans and metrics go nowhere",
                        f"to see them, set {ENDPOINT_VARIABLE} to a receiver's, or write spans to a file: "
                        f"OTEL_TRACES_EXPORTER={EXPORTER_NAME} {PATH_VARIABLE}=spans.jsonl "
                        "OTEL_METRICS_EXPORTER=none",
                    )
                elif why is not None and signal == "traces":
                    unreachable.add(receiver)
                    report.problem(f"the OTLP endpoint {shown} {state}", _fix_for(why))
                elif why is not None and receiver not in unreachable:
                    # every configured signal counts: a receiver that takes spans but not metrics
                    # (Phoenix, Jaeger) fills the app's log with failed metric exports
                    report.problem(
                        f"the OTLP endpoint {shown} does not take {signal} ({why})",
                        f"send {signal} elsewhere with OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT, or turn "
                        f"them off with OTEL_{signal.upper()}_EXPORTER=none",
                    )
            else:
                report.say(f"  {signal}: {description}")
            exporter.shutdown()


def _fix_for(why: str) -> str:
    if why == _HTTP1:
        return PROTOCOL_FIX
    if "no answer" in why:
        return (
            "restart the receiver there (or the proxy in front of it): it takes connections and "
            "hangs, and spans sent to it are lost"
        )
    if why.startswith("answers"):
        return "check the receiver's log and its OTLP settings (path, headers, TLS): it refuses exports"
    return "start the collector there, or point OTEL_EXPORTER_OTLP_ENDPOINT at one that runs"


def diagnose() -> Report:
    report = Report()
    report.say(f"otel-handoff {__version__} · Python {sys.version.split()[0]} · {sys.executable}")
    _frameworks(report)
    _requirements(report)
    _auto_instrumentation(report)
    _export(report)
    return report


def main() -> int:
    report = diagnose()
    sys.stdout.write(report.render())
    return 1 if report.problems else 0
