"""Jaeger v2, our collector and Debian's Prometheus, run from the files in ``collector-config/``.

The binaries are built with Go by ``.ci/install-receivers.sh`` (Jaeger v2.13 from its module,
``otelcol-handoff`` with the OpenTelemetry Collector Builder) and linked into the test venv;
``OTEL_HANDOFF_JAEGER`` / ``OTEL_HANDOFF_OTELCOL`` point at others. Each runs in one
:class:`netns.Namespace`, as docker-compose runs them: Jaeger on ``jaeger``, the collector on
``otel-collector``, Prometheus on ``prometheus``, on the ports the shipped files name, reached
from the tests through relay ports the OS assigned. The files run unchanged; only each
process's internal telemetry endpoint (127.0.0.1:8888, private inside a container, shared in one
namespace) is turned off on the command line where two processes would both claim it.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import netns
from receivers import OtlpPorts, Span, missing, request_spans, wait_until

from otel_handoff.export import otlp_json

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "collector-config"
JAEGER_CONFIG = CONFIG_DIR / "jaeger" / "config.yaml"
PROMETHEUS_CONFIG = CONFIG_DIR / "prometheus.yaml"
NO_INTERNAL_TELEMETRY = "--set=service::telemetry::metrics::level=none"
# tags Jaeger's /api/traces adds to every span from the OTLP span's own fields
_JAEGER_TAGS = {"otel.scope.name", "otel.scope.version", "span.kind", "otel.status_code", "error"}
_JAEGER_TAGS_ON_ERROR = {"otel.status_description"}
# what Jaeger notes on a span itself, e.g. "@jaeger@warnings" for a child ending after its parent
# (LiveKit's on_enter, which may run on past the handoff: docs/livekit.md)
_JAEGER_NOTES = "@jaeger@"


def executable(name: str, variable: str) -> Path:
    """A Go-built receiver: ``$variable``, else the test venv's ``bin/name``; skip/fail if missing."""
    configured = os.environ.get(variable)
    candidate = Path(configured) if configured else Path(sys.prefix) / "bin" / name
    if not (candidate.exists() and os.access(candidate, os.X_OK)):
        missing(f"{name} not found ({variable}, or {candidate})")
    return candidate


def namespace(workdir: Path) -> netns.Namespace:
    reason = netns.unavailable()
    if reason:
        missing(reason)
    return netns.Namespace.create(workdir)


def _http(url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def _get_json(url: str) -> Any:
    status, body = _http(url)
    assert status == 200, (url, status, body[:500])
    return json.loads(body)


class JsonLinePeer:
    """A process in a network namespace (a real call's caller) spoken to in JSON lines: one
    command on its stdin, one answer on its stdout; its stderr goes to ``log``. It is stopped
    with the namespace, whatever happens."""

    def __init__(
        self, space: netns.Namespace, command: list[str], log: Path, env: dict[str, str], started: str
    ) -> None:
        self.log = log
        with log.open("ab") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env
            )
        space.processes.append(self.process)
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answer(started, 60.0)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def _answer(self, what: str, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}") from None
        if not line:
            raise AssertionError(f"the caller exited: {_tail(self.log)}")
        return json.loads(line)

    def ask(self, command: dict[str, Any], what: str, timeout: float) -> dict[str, Any]:
        """Send ``command``; its answer, failing naming ``what`` at ``timeout`` seconds."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()
        return self._answer(what, timeout)

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        netns.stop(self.process)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _started(process: Any, log: Path, what: str, ready: Any) -> None:
    """Wait until ``ready()`` (or the process exits: then fail with the end of its log)."""
    wait_until(lambda: process.poll() is not None or ready(), f"{what} to be ready", timeout=60, every=0.1)
    assert process.poll() is None, f"{what} exited: {_tail(log)}"


@dataclass
class Jaeger(OtlpPorts):
    """Jaeger v2 with ``collector-config/jaeger/config.yaml``: OTLP in, memory store, query API."""

    process: Any
    grpc_port: int
    http_port: int
    query_port: int
    log: Path

    @classmethod
    def start(
        cls, space: netns.Namespace, host: str = "jaeger", *extra: str, config: Path = JAEGER_CONFIG
    ) -> Jaeger:
        binary = executable("jaeger", "OTEL_HANDOFF_JAEGER")
        log = space.workdir / f"{host}.log"
        # Jaeger traces its own queries to 127.0.0.1:4317 unless told not to: nobody listens there
        env = {"PATH": os.environ.get("PATH", ""), "JAEGER_HOST": host, "OTEL_TRACES_SAMPLER": "always_off"}
        process = space.start([str(binary), f"--config={config}", *extra], log, env)
        grpc, http, query = space.expose(f"{host}:4317", f"{host}:4318", f"{host}:16686")
        jaeger = cls(process, grpc, http, query, log)
        _started(process, log, "Jaeger", jaeger.ready)
        return jaeger

    def ready(self) -> bool:
        """The OTLP receiver takes an empty export and the query API answers."""
        accepted, _ = _http(
            f"{self.http_endpoint}/v1/traces", b"", {"Content-Type": "application/x-protobuf"}
        )
        return accepted == 200 and _http(f"{self.url}/api/services")[0] in (200, 401)  # 401: behind auth

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def get(self, path: str, **params: Any) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return _get_json(f"{self.url}{path}{query}")

    def traces_url(self, service: str, limit: int = 1000) -> str:
        """The URL the UI's search reads (and ``otel-handoff summary`` is pointed at)."""
        return f"{self.url}/api/traces?{urllib.parse.urlencode({'service': service, 'limit': limit})}"

    def spans(self, service: str, limit: int = 1000) -> list[Span]:
        """Every span of ``service``'s traces, through ``/api/traces`` (the UI's search)."""
        answer = _get_json(self.traces_url(service, limit))
        assert not answer.get("errors"), answer["errors"]
        return [jaeger_span(span) for trace in answer["data"] for span in trace["spans"]]

    def trace_ids(self, service: str, limit: int = 1000) -> set[str]:
        return {trace["traceID"] for trace in self.get("/api/traces", service=service, limit=limit)["data"]}

    def spans_v3(self, trace_id: str) -> list[Span]:
        """One trace through ``/api/v3/traces/{id}``: OTLP/JSON, read with json_format."""
        answer = self.get(f"/api/v3/traces/{trace_id}")
        spans = request_spans(otlp_json.parse_request(answer["result"]))
        for span in spans:
            span["attributes"] = {
                k: v for k, v in span["attributes"].items() if not k.startswith(_JAEGER_NOTES)
            }
        return spans

    def tail(self) -> str:
        return _tail(self.log)


def jaeger_span(span: dict[str, Any]) -> Span:
    """A span of Jaeger's ``/api/traces``: CHILD_OF is the parent, FOLLOWS_FROM a link; times in µs."""
    parent = next((r["spanID"] for r in span["references"] if r["refType"] == "CHILD_OF"), None)
    tags = {tag["key"]: tag["value"] for tag in span["tags"]}
    status = str(tags.get("otel.status_code", "UNSET")).upper()
    dropped = _JAEGER_TAGS | (_JAEGER_TAGS_ON_ERROR if status == "ERROR" else set())
    return {
        "trace_id": span["traceID"],
        "span_id": span["spanID"],
        "parent_id": parent,
        "name": span["operationName"],
        "status": status,
        "attributes": {k: v for k, v in tags.items() if k not in dropped and not k.startswith(_JAEGER_NOTES)},
        "links": sorted(r["spanID"] for r in span["references"] if r["refType"] == "FOLLOWS_FROM"),
        "start_us": span["startTime"],
        "duration_us": span["duration"],
    }


def as_jaeger_tags(attributes: dict[str, Any]) -> dict[str, Any]:
    """What Jaeger's ``/api/traces`` shows for OTLP attributes: arrays become JSON text."""
    return {
        key: json.dumps(value, separators=(",", ":")) if isinstance(value, (list, tuple)) else value
        for key, value in attributes.items()
    }


@dataclass
class Collector(OtlpPorts):
    """``otelcol-handoff`` running one of ``collector-config/otelcol-*.yaml``, unchanged."""

    process: Any
    grpc_port: int
    http_port: int
    metrics_port: int
    log: Path

    @classmethod
    def start(cls, space: netns.Namespace, config: Path, *overrides: str) -> Collector:
        binary = executable("otelcol-handoff", "OTEL_HANDOFF_OTELCOL")
        log = space.workdir / f"otelcol-{config.stem}.log"
        env = {"PATH": os.environ.get("PATH", ""), "OTELCOL_HOST": "otel-collector"}
        command = [str(binary), f"--config={config}", NO_INTERNAL_TELEMETRY, *overrides]
        process = space.start(command, log, env)
        grpc, http, metrics, health = space.expose(
            "otel-collector:4317", "otel-collector:4318", "otel-collector:8889", "otel-collector:13133"
        )
        collector = cls(process, grpc, http, metrics, log)
        _started(process, log, "the collector", lambda: _http(f"http://127.0.0.1:{health}/")[0] == 200)
        return collector

    def metrics_text(self, openmetrics: bool = True) -> str:
        accept = "application/openmetrics-text; version=1.0.0" if openmetrics else "text/plain"
        status, body = _http(f"http://127.0.0.1:{self.metrics_port}/metrics", headers={"Accept": accept})
        assert status == 200, status
        return body.decode()

    def rss_bytes(self) -> int:
        """The collector's resident memory (the process nsenter execs into)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def cpu_seconds(self) -> float:
        """User + system CPU time the collector has used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def tail(self) -> str:
        return _tail(self.log)


@dataclass
class Prometheus:
    """Debian's Prometheus with ``collector-config/prometheus.yaml`` and exemplar storage on."""

    process: Any
    port: int
    log: Path
    extra: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, space: netns.Namespace, config: Path = PROMETHEUS_CONFIG) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            missing("prometheus (Debian's package)")
        log = space.workdir / "prometheus.log"
        command = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={space.workdir / 'prometheus-data'}",
            "--web.listen-address=prometheus:9090",
            "--enable-feature=exemplar-storage",
        ]
        process = space.start(command, log, {"PATH": os.environ.get("PATH", "")})
        (port,) = space.expose("prometheus:9090")
        prometheus = cls(process, port, log)
        _started(process, log, "Prometheus", lambda: _http(f"{prometheus.url}/-/ready")[0] == 200)
        return prometheus

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def exemplars(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode({"query": expr, "start": start, "end": end})
        answer = _get_json(f"{self.url}/api/v1/query_exemplars?{params}")
        assert answer["status"] == "success", answer
        return answer["data"]


@dataclass
class LiveKitServer:
    """livekit-server v1.11 in development mode (its placeholder keys ``devkey``/``secret``) on the
    namespace's loopback, on its fixed ports: 7880 (HTTP, signalling), 7881 (ICE/TCP) and 7882
    (ICE/UDP), fine inside a private namespace. WebRTC media does not pass the TCP relays, so
    everything that joins a room runs in the same namespace (:meth:`netns.Namespace.start`);
    the test reaches only the HTTP port, through a relay."""

    process: Any
    port: int
    log: Path
    url = "ws://localhost:7880"  # inside the namespace
    api_key = "devkey"
    api_secret = "secret"
    # WebRTC gathers no ICE candidates on a loopback interface: the media goes over an address
    # of a veth pair inside the namespace (both ends there, so it never leaves it)
    media_address = "10.250.0.1"

    @classmethod
    def start(cls, space: netns.Namespace) -> LiveKitServer:
        binary = executable("livekit-server", "OTEL_HANDOFF_LIVEKIT_SERVER")
        log = space.workdir / "livekit-server.log"
        inside = ["nsenter", "-t", str(space.holder.pid), "--net", "ip"]
        for args in (
            ["link", "add", "lk-media", "type", "veth", "peer", "name", "lk-peer"],
            ["addr", "add", f"{cls.media_address}/32", "dev", "lk-media"],
            ["link", "set", "lk-peer", "up"],
            ["link", "set", "lk-media", "up"],
        ):
            subprocess.run([*inside, *args], check=True, capture_output=True)
        command = [
            str(binary),
            "--dev",
            "--bind=127.0.0.1",
            f"--bind={cls.media_address}",
            f"--node-ip={cls.media_address}",
        ]
        process = space.start(command, log, {"PATH": os.environ.get("PATH", "")})
        (port,) = space.expose("localhost:7880")
        server = cls(process, port, log)
        _started(process, log, "livekit-server", lambda: _http(f"http://127.0.0.1:{port}/")[0] == 200)
        return server

    def tail(self) -> str:
        return _tail(self.log)
