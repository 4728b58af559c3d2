"""The ``OTEL_*`` settings, checked before the SDK reads them: one line per bad value.

A value the SDK would reject (a traceback at start-up) or misread is reported once, naming the
variable and what it accepts, and the exporter it concerns is left off; the app keeps running.
The facts are kept as :class:`Problem` values, which ``otel-handoff doctor`` reads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit

from opentelemetry import environment_variables as api_env
from opentelemetry.sdk import environment_variables as env
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.util.re import parse_env_headers

# the reporter, and the setting the instrumentors read themselves (core reads nothing from here);
# Problem, PHASE_METRICS and phase_metrics re-exported for export's and doctor's readers
from ..core.settings import PHASE_METRICS as PHASE_METRICS
from ..core.settings import Problem as Problem
from ..core.settings import first_set, report_problem, true_or_false
from ..core.settings import phase_metrics as phase_metrics

Signal = Literal["traces", "metrics"]

# protocol -> the OTLP exporter's entry-point name, as the SDK's configurator maps
# OTEL_EXPORTER_OTLP_PROTOCOL (grpc is its default); the SDK keeps its table private
OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
PROTOCOL_BY_OTLP = {name: protocol for protocol, name in OTLP_BY_PROTOCOL.items()}
_DEFAULT_ENDPOINT = {"grpc": "http://localhost:4317", "http/protobuf": "http://localhost:4318"}
# what each OTLP exporter accepts in OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION
_COMPRESSIONS = {"grpc": ("gzip",), "http/protobuf": ("gzip", "deflate", "none")}
_HTTP_PATH: dict[Signal, str] = {"traces": "v1/traces", "metrics": "v1/metrics"}
_HEADERS_ACCEPTED = "use comma-separated name=value pairs, values URL-encoded, e.g. 'api-key=abc,team=a%20b'"

# the SDK's names of the variables: (the signal's own, the shared one)
_OTLP_VARIABLES: dict[str, dict[Signal, tuple[str, str]]] = {
    "PROTOCOL": {
        "traces": (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, env.OTEL_EXPORTER_OTLP_PROTOCOL),
        "metrics": (env.OTEL_EXPORTER_OTLP_METRICS_PROTOCOL, env.OTEL_EXPORTER_OTLP_PROTOCOL),
    },
    "ENDPOINT": {
        "traces": (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, env.OTEL_EXPORTER_OTLP_ENDPOINT),
        "metrics": (env.OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, env.OTEL_EXPORTER_OTLP_ENDPOINT),
    },
    "HEADERS": {
        "traces": (env.OTEL_EXPORTER_OTLP_TRACES_HEADERS, env.OTEL_EXPORTER_OTLP_HEADERS),
        "metrics": (env.OTEL_EXPORTER_OTLP_METRICS_HEADERS, env.OTEL_EXPORTER_OTLP_HEADERS),
    },
    "TIMEOUT": {
        "traces": (env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, env.OTEL_EXPORTER_OTLP_TIMEOUT),
        "metrics": (env.OTEL_EXPORTER_OTLP_METRICS_TIMEOUT, env.OTEL_EXPORTER_OTLP_TIMEOUT),
    },
    "COMPRESSION": {
        "traces": (env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, env.OTEL_EXPORTER_OTLP_COMPRESSION),
        "metrics": (env.OTEL_EXPORTER_OTLP_METRICS_COMPRESSION, env.OTEL_EXPORTER_OTLP_COMPRESSION),
    },
}
EXPORTER_VARIABLE: dict[Signal, str] = {
    "traces": api_env.OTEL_TRACES_EXPORTER,
    "metrics": api_env.OTEL_METRICS_EXPORTER,
}


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED``, read as the SDK reads it (a bad value reported once)."""
    return true_or_false(env.OTEL_SDK_DISABLED, False, "Read as false, as the SDK does: telemetry is on")


def resource(service_name: str | None) -> Resource:
    """``Resource.create()``, which reads ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``."""
    setting = first_set(env.OTEL_RESOURCE_ATTRIBUTES)
    if setting and any("=" not in entry for entry in setting[1].split(",")):
        report_problem(
            setting[0],
            "has entries that are not key=value",
            "use comma-separated key=value pairs, e.g. 'deployment.environment=prod,team=voice'",
            "Those entries are ignored",
        )
        # ours says it once; the SDK would say it per entry, each time it reads the variable
        logging.getLogger("opentelemetry.sdk.resources").addFilter(_not_a_resource_pair_warning)
    resource = Resource.create()
    if service_name and str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    return resource


def _not_a_resource_pair_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Invalid key value resource attribute pair")


def _url_problem(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "is not an http:// or https:// URL"
    return None


def _headers_problem(value: str) -> str | None:
    """Each entry parsed alone by the SDK's own (liberal) header parser, its warning kept quiet."""
    entries = [entry for entry in re.split(r"[ \t]*,[ \t]*", value) if entry]
    sdk_log = logging.getLogger("opentelemetry.util.re")
    previous, sdk_log.disabled = sdk_log.disabled, True  # it would log the value: headers carry keys
    try:
        bad = [n for n, entry in enumerate(entries, 1) if not parse_env_headers(entry, liberal=True)]
    finally:
        sdk_log.disabled = previous
    if bad:  # never the values: headers carry API keys
        return f"is malformed (entry {bad[0]} of {len(entries)})"
    return None


def _compression_problem(protocol: str, value: str) -> str | None:
    return None if value.lower() in _COMPRESSIONS[protocol] else f"is {value!r}"


def _timeout_problem(value: str) -> str | None:
    try:
        ok = float(value) > 0
    except ValueError:
        ok = False
    return None if ok else f"is {value!r}"


# A timeout the Python SDK reads as seconds but that only makes sense as milliseconds, the unit of
# the OpenTelemetry specification (whose default, 10000, is 10 s): 1000 s or more, over 16 minutes.
MILLISECONDS_LIKELY = 1000.0


def _timeout_in_milliseconds(variable: str, value: str) -> None:
    seconds = float(value)
    if seconds >= MILLISECONDS_LIKELY:
        report_problem(
            variable,
            f"is {value}, which the Python SDK reads as seconds ({seconds / 3600:.1f} h per export), "
            "not as the specification's milliseconds",
            f"use {variable}={seconds / 1000:g} (seconds) for the {seconds / 1000:g} s it likely means",
            "Exporting stays on with the value as read",
            kept=True,
        )


def endpoint_variable(signal: Signal) -> str:
    """The variable that sets where ``signal`` goes: its own, if set, else the shared one."""
    own, shared = _OTLP_VARIABLES["ENDPOINT"][signal]
    return own if first_set(own) else shared


def what_to_check(signal: Signal, reason: str | None = None) -> str:
    """The clause every export failure line ends with: what to look at, and the tool for it; first
    the fix itself where the failure names it (``reason``: the exporter's words)."""
    hint = protocol_hint(reason)
    return f"{hint + '; ' if hint else ''}check {endpoint_variable(signal)}, or run `otel-handoff doctor`"


# what gRPC says when the endpoint answers in HTTP/1.1 (an OTLP/HTTP port, usually 4318)
_GRPC_AT_HTTP1 = ("Failed parsing HTTP/2", "Expected SETTINGS frame")


def protocol_hint(reason: str | None) -> str | None:
    """The newcomer's usual mistake, said as its fix: the gRPC exporter (the default) pointed at an
    OTLP/HTTP port."""
    if reason and any(words in reason for words in _GRPC_AT_HTTP1):
        http1 = "the endpoint speaks HTTP/1.1 (OTLP/HTTP, port 4318 by convention), the exporter gRPC"
        return f"{http1}: {PROTOCOL_FIX}"
    return None


PROTOCOL_FIX = "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, or use the receiver's gRPC port (4317)"


def otlp_settings(signal: Signal, protocol_override: str | None) -> tuple[str, str] | None:
    """(protocol, endpoint) for OTLP export of ``signal``, or None when a setting is invalid."""

    def off(variable: str) -> str:
        own = variable in (names[signal][0] for names in _OTLP_VARIABLES.values())
        return f"OTLP export of {signal} is off" if own else "OTLP export is off"

    if protocol_override is not None:
        protocol = protocol_override
    else:
        setting = first_set(*_OTLP_VARIABLES["PROTOCOL"][signal])
        protocol = setting[1] if setting else "grpc"
        if setting and protocol not in OTLP_BY_PROTOCOL:
            report_problem(setting[0], f"is {protocol!r}", "use grpc or http/protobuf", off(setting[0]))
            return None

    # as the exporters read them: the signal's own variable, else the shared one
    own_variable, shared_variable = _OTLP_VARIABLES["ENDPOINT"][signal]
    signal_endpoint = first_set(own_variable)
    base_endpoint = first_set(shared_variable)
    setting = signal_endpoint or base_endpoint
    if setting and (problem := _url_problem(setting[1])):
        accepted = "use a URL like http://127.0.0.1:4317"
        report_problem(setting[0], f"{problem}: {setting[1]!r}", accepted, off(setting[0]))
        return None
    checks: list[tuple[str, Callable[[str], str | None], str]] = [
        ("HEADERS", _headers_problem, _HEADERS_ACCEPTED),
        ("TIMEOUT", _timeout_problem, "use a number of seconds greater than 0"),
        (
            "COMPRESSION",
            lambda value: _compression_problem(protocol, value),
            f"the {protocol} exporter takes {' or '.join(_COMPRESSIONS[protocol])} (or leave it unset)",
        ),
    ]
    for suffix, check, accepted in checks:
        setting = first_set(*_OTLP_VARIABLES[suffix][signal])
        if setting and (problem := check(setting[1])):
            report_problem(setting[0], problem, accepted, off(setting[0]))
            return None
    if timeout := first_set(*_OTLP_VARIABLES["TIMEOUT"][signal]):
        _timeout_in_milliseconds(*timeout)

    # where the exporter will send, as it resolves it (for the log lines and the summary)
    if signal_endpoint:
        endpoint = signal_endpoint[1]
    elif protocol == "http/protobuf":
        endpoint = f"{(base_endpoint[1] if base_endpoint else _DEFAULT_ENDPOINT[protocol]).rstrip('/')}/"
        endpoint += _HTTP_PATH[signal]
    else:
        endpoint = base_endpoint[1] if base_endpoint else _DEFAULT_ENDPOINT[protocol]
    return protocol, endpoint
