"""Real OTLP receivers for the export tests: rotel (a collector) and Arize Phoenix (a backend).

Each is started on free loopback ports, read back through its own output (rotel's debug
log, Phoenix's REST API) and stopped by PID; ``run_demo`` and the ``check_*`` helpers run the
offline demo against them and compare what arrived with what the demo sent.

Phoenix always binds its gRPC port on ``[::]``, so it runs in a network namespace of its own
(``unshare -n``, only ``lo`` up) and a relay (:mod:`netns`) forwards loopback ports here to it:
nothing listens beyond 127.0.0.1. Installed by
``.ci/install-receivers.sh``; missing ones skip the tests locally and fail them in CI.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import environments
import netns
import pytest
from netns import stop

from otel_handoff.core import schema as sc
from otel_handoff.export import otlp_json

T = TypeVar("T")

INSTALL = ".ci/install-receivers.sh"
PHOENIX_VENV = Path(
    os.environ.get("PHOENIX_VENV", Path.home() / ".cache" / "otel-handoff" / "phoenix-venv")
).expanduser()
IN_CI = os.environ.get("CI", "").lower() == "true"

Span = dict[str, Any]
"""A span as every reader here returns it: trace_id, span_id, parent_id (hex or None),
name, status (UNSET/OK/ERROR) and attributes (plain Python values)."""


def missing(what: str) -> None:
    """Skip (locally) or fail (in CI) a test whose receiver is not installed."""
    message = f"{what}: run `bash {INSTALL} {sys.prefix}` to install the test receivers"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port held bound but not listening: connecting is refused, and no other process
    (a collector started by another test) can take it meanwhile, as a guessed free port allows."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def wait_until(check: Callable[[], T | None], what: str, timeout: float = 20.0, every: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# --- spans from an OTLP JSON Lines file (`otel-handoff demo --export FILE`) --------------------
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def otlp_span(span: Any) -> Span:
    """A span of an OTLP protobuf message, with its links (span ids) and times (ns)."""
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_id": span.parent_span_id.hex() or None,
        "name": span.name,
        "status": _STATUS[span.status.code],
        "attributes": {a.key: otlp_json.any_value(a.value) for a in span.attributes},
        "links": sorted(link.span_id.hex() for link in span.links),
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
    }


def request_spans(request: Any) -> list[Span]:
    """Every span of an ``ExportTraceServiceRequest``."""
    return [
        otlp_span(span)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def read_otlp_json(path: Path) -> list[Span]:
    """Spans of an OTLP JSON Lines file, read with json_format (otel_handoff's one OTLP/JSON reader)."""
    spans: list[Span] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        spans.extend(request_spans(otlp_json.parse_request(json.loads(line))))
    return spans


# --- rotel ------------------------------------------------------------------------------------
def rotel_executable() -> Path | None:
    spec = importlib.util.find_spec("rotel")
    if spec is None or spec.origin is None:
        return None
    agent = Path(spec.origin).parent / "rotel-agent"
    return agent if agent.exists() else None


_ROTEL_VALUE = re.compile(r"^(Str|Int|Double|Bool|Slice|Bytes|Map)\((.*)\)$", re.S)


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _rotel_value(text: str) -> Any:
    match = _ROTEL_VALUE.match(text.strip())
    if match is None:
        return text
    kind, body = match.groups()
    if kind == "Str":
        return body
    if kind == "Int":
        return int(body)
    if kind == "Double":
        return float(body)
    if kind == "Bool":
        return body == "true"
    if kind == "Slice":
        return [_rotel_value(part) for part in _split_top_level(body)]
    return text


def parse_rotel_debug(text: str) -> list[Span]:
    """Spans from rotel's ``--debug-log traces --debug-log-verbosity detailed`` output."""
    spans: list[Span] = []
    span: Span | None = None
    resource: dict[str, Any] = {}
    section = ""
    header = re.compile(r"^\s+(Trace ID|Parent ID|ID|Name|Status code)\s+: ?(.*)$")
    for line in text.splitlines():
        if line.startswith("ResourceSpans #"):
            span, resource, section = None, {}, ""
            continue
        if line.startswith("ScopeSpans #"):
            span, section = None, ""
            continue
        if line.startswith("Span #"):
            span = {"parent_id": None, "status": "UNSET", "attributes": {}, "resource": resource}
            spans.append(span)
            section = ""
            continue
        if line in ("Resource attributes:", "Attributes:", "Events:", "Links:"):
            section = line
            continue
        if line.startswith("     -> ") and section in ("Resource attributes:", "Attributes:"):
            key, _, value = line[len("     -> ") :].partition(": ")
            if section == "Resource attributes:":
                resource[key] = _rotel_value(value)
            elif span is not None:
                span["attributes"][key] = _rotel_value(value)
            continue
        if span is not None and not section and (match := header.match(line)):
            key, value = match.groups()
            value = value.strip()
            if key == "Trace ID":
                span["trace_id"] = value
            elif key == "Parent ID":
                span["parent_id"] = value or None
            elif key == "ID":
                span["span_id"] = value
            elif key == "Name":
                span["name"] = value
            else:
                span["status"] = value.removeprefix("STATUS_CODE_")
    return [s for s in spans if "span_id" in s]


class OtlpPorts:
    """The OTLP endpoints of a receiver with ``grpc_port`` and ``http_port`` on 127.0.0.1."""

    grpc_port: int
    http_port: int

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


@dataclass
class Rotel(OtlpPorts):
    """A rotel collector printing every span it receives; optionally forwarding them on.

    rotel cannot report a port-0 bind, so it runs in a network namespace of its own on fixed ports,
    reached through relay ports the OS assigned (:mod:`netns`); what it forwards to leaves the
    namespace through a relay too. A restart keeps the namespace, so the ports stay the same.
    """

    process: subprocess.Popen[bytes]
    grpc_port: int
    http_port: int
    output: Path
    space: netns.Namespace

    @classmethod
    def start(cls, workdir: Path, *, forward_to: str | None = None, restart: Rotel | None = None) -> Rotel:
        """Start rotel, or start it again (``restart``: a stopped one's namespace, hence its ports)."""
        agent = rotel_executable()
        if agent is None:
            missing("rotel is not installed in this Python environment")
            raise AssertionError("unreachable")
        reason = netns.unavailable()
        if reason:
            missing(reason)
        workdir.mkdir(parents=True, exist_ok=True)
        space = restart.space if restart is not None else netns.Namespace.create(workdir / "netns")
        if forward_to:
            home_port = int(forward_to.rsplit(":", 1)[1].rstrip("/"))
            space.reach_home(f"127.0.0.1:{_ROTEL_FORWARD}", home_port)
            exporter = [
                "--exporter",
                "otlp",
                "--otlp-exporter-endpoint",
                f"http://127.0.0.1:{_ROTEL_FORWARD}",
            ]
            exporter += ["--otlp-exporter-protocol", "grpc"]
        else:
            exporter = ["--exporter", "blackhole"]
        output = workdir / "rotel.out"
        command = [
            # rotel's agent links libpython of the Python it was installed for: a pyenv build keeps
            # it in its own lib folder (3.12's is in no system path), where the loader would not look
            "env",
            f"LD_LIBRARY_PATH={sysconfig.get_config_var('LIBDIR') or ''}",
            str(agent),
            "start",
            "--otlp-grpc-endpoint",
            f"127.0.0.1:{_ROTEL_GRPC}",
            "--otlp-http-endpoint",
            f"127.0.0.1:{_ROTEL_HTTP}",
            *exporter,
            "--debug-log",
            "traces",
            "--debug-log-verbosity",
            "detailed",
            "--pid-file",
            str(workdir / "rotel.pid"),
            "--log-file",
            str(workdir / "rotel.log"),
        ]
        process = space.start(command, output)
        if restart is not None:
            grpc_port, http_port = restart.grpc_port, restart.http_port
        else:
            grpc_port, http_port = space.expose(f"127.0.0.1:{_ROTEL_GRPC}", f"127.0.0.1:{_ROTEL_HTTP}")
        rotel = cls(process, grpc_port, http_port, output, space)
        try:
            wait_until(
                lambda: process.poll() is not None or rotel._accepts(),
                "rotel to take exports",
                timeout=15,
            )
            if process.poll() is not None:
                raise AssertionError(f"rotel exited: {output.read_text(errors='replace')[-2000:]}")
        except BaseException:
            rotel.stop()
            raise
        return rotel

    def _accepts(self) -> bool:
        """An empty OTLP/HTTP export is answered (through the relay, a bare connect always is)."""
        request = urllib.request.Request(
            f"{self.http_endpoint}/v1/traces", data=b"", headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def spans(self) -> list[Span]:
        return parse_rotel_debug(self.output.read_text(encoding="utf-8", errors="replace"))

    def stop(self, *, keep_ports: bool = False) -> None:
        """Stop rotel; with ``keep_ports``, keep its namespace and relays for a restart."""
        stop(self.process)
        if not keep_ports:
            self.space.stop()


# inside rotel's own namespace: its OTLP ports, and where it forwards to (relayed out)
_ROTEL_GRPC, _ROTEL_HTTP, _ROTEL_FORWARD = 4317, 4318, 14317


# --- Arize Phoenix ------------------------------------------------------------------------------
def phoenix_executable() -> Path | None:
    configured = os.environ.get("OTEL_HANDOFF_PHOENIX")
    candidate = Path(configured) if configured else PHOENIX_VENV / "bin" / "phoenix"
    return candidate if candidate.exists() and os.access(candidate, os.X_OK) else None


_PHOENIX_HTTP, _PHOENIX_GRPC = 6006, 4317  # inside its own network namespace: no clashes


@dataclass
class Phoenix:
    """Phoenix in a private network namespace, reached through loopback relay ports."""

    process: subprocess.Popen[bytes]
    relay: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    log: Path

    @classmethod
    def start(cls, workdir: Path, **settings: str) -> Phoenix:
        """``settings``: more of Phoenix's variables (``PHOENIX_ENABLE_AUTH``, say)."""
        executable = phoenix_executable()
        if executable is None:
            missing(f"Arize Phoenix not found (OTEL_HANDOFF_PHOENIX, or {PHOENIX_VENV}/bin/phoenix)")
            raise AssertionError("unreachable")
        if shutil.which("unshare") is None or shutil.which("ip") is None:
            missing("Phoenix runs isolated with `unshare -n` and `ip` (util-linux, iproute2)")
        workdir.mkdir(parents=True, exist_ok=True)
        log = workdir / "phoenix.log"
        env = {
            **os.environ,
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(_PHOENIX_HTTP),
            "PHOENIX_GRPC_PORT": str(_PHOENIX_GRPC),
            "PHOENIX_WORKING_DIR": str(workdir / "data"),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            **settings,
        }
        for key in [k for k in env if k.startswith("OTEL_")]:
            del env[key]
        # exec all the way down: the PID we hold is Phoenix's own
        command = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" serve', str(executable)]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        own_namespace = os.readlink("/proc/self/ns/net")

        def isolated() -> bool:
            with contextlib.suppress(OSError):
                return os.readlink(f"/proc/{process.pid}/ns/net") != own_namespace
            return process.poll() is not None

        wait_until(isolated, "Phoenix's network namespace", timeout=10, every=0.01)
        # port 0: the relay binds, then says which ports it got
        relay = netns.relay(process.pid, [f"0:{_PHOENIX_HTTP}", f"0:{_PHOENIX_GRPC}"])
        phoenix = cls(process, relay, 0, 0, log)
        try:
            assert relay.stdout is not None
            ready = relay.stdout.readline().decode(errors="replace").split()
            if ready[:2] != ["relay", "ready"]:
                if process.poll() is not None:
                    missing(f"Phoenix could not start isolated (unshare -n needs root): {phoenix.tail()}")
                raise AssertionError(f"relay failed: {ready} {relay.stdout.read(2000)!r}")
            phoenix.http_port, phoenix.grpc_port = (int(port) for port in ready[2:4])
            wait_until(
                lambda: process.poll() is not None or phoenix._healthy(),
                "Phoenix to answer /healthz",
                timeout=120,
                every=0.2,
            )
            if process.poll() is not None:
                raise AssertionError(f"Phoenix exited: {phoenix.tail()}")
        except BaseException:
            phoenix.stop()
            raise
        return phoenix

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                return response.status == 200
        except urllib.error.HTTPError as error:
            return error.code == 401  # up, behind auth
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as response:
            return json.load(response)

    def project_id(self, project: str) -> str | None:
        return next((p["id"] for p in self.get("/v1/projects")["data"] if p["name"] == project), None)

    def spans(self, project: str) -> list[Span]:
        """Every span of ``project``, paged through Phoenix's REST API."""
        if self.project_id(project) is None:
            return []
        spans: list[Span] = []
        cursor = None
        for _ in range(100):  # bounded: 100 pages of 1000
            query = f"?limit=1000{f'&cursor={cursor}' if cursor else ''}"
            page = self.get(f"/v1/projects/{project}/spans{query}")
            for span in page["data"]:
                spans.append(
                    {
                        "trace_id": span["context"]["trace_id"],
                        "span_id": span["context"]["span_id"],
                        "parent_id": span.get("parent_id") or None,
                        "name": span["name"],
                        "status": span.get("status_code", "UNSET"),
                        "attributes": span.get("attributes", {}),
                        "node_id": span.get("id"),
                    }
                )
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return spans

    def stop(self) -> None:
        stop(self.process, timeout=15)
        stop(self.relay)


class _Shared:
    """One Phoenix per test session, shared by every module that asks (it takes seconds to start)."""

    def __init__(self) -> None:
        self.phoenix: Phoenix | None = None
        self.users = 0
        self.lock = threading.Lock()


_SHARED = _Shared()


@contextlib.contextmanager
def shared_phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with _SHARED.lock:
        if _SHARED.phoenix is None:
            _SHARED.phoenix = Phoenix.start(tmp_path_factory.mktemp("phoenix"))
        _SHARED.users += 1
        phoenix = _SHARED.phoenix
    try:
        yield phoenix
    finally:
        with _SHARED.lock:
            _SHARED.users -= 1
            if _SHARED.users == 0 and _SHARED.phoenix is not None:
                _SHARED.phoenix.stop()
                _SHARED.phoenix = None


# --- the demo, and what must arrive -------------------------------------------------------------
LIVEKIT_ROOT = "agent_session"  # LiveKit's own span for a session: every handoff trace hangs off it
ARRIVAL_TIMEOUT = 30.0
_runs = itertools.count()


def clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(overrides)
    return env


@dataclass
class DemoRun:
    """A finished ``otel-handoff demo`` run: its output and the spans it wrote with ``--export``."""

    stdout: str
    stderr: str
    exported: list[Span]

    def handoffs(self) -> list[Span]:
        return [s for s in self.exported if s["name"] == sc.SPAN_HANDOFF]


def run_demo(workdir: Path, framework: str = "livekit", **env: str) -> DemoRun:
    """``otel-handoff demo --framework F --export FILE`` with ``env`` added to a clean environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    export = workdir / f"demo-{next(_runs)}.jsonl"
    python = environments.python_for(framework)  # this one, or the framework's own environment's
    result = subprocess.run(
        [python, "-m", "otel_handoff", "demo", "--framework", framework, "--export", str(export)],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=workdir,
    )
    assert result.returncode == 0, f"demo failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return DemoRun(result.stdout, result.stderr, read_otlp_json(export))


def project_name() -> str:
    """A Phoenix project of the test's own (Phoenix files spans by this resource attribute)."""
    return f"otel-handoff-{uuid.uuid4().hex[:8]}"


# --- checks -------------------------------------------------------------------------------------
def arrived(expected: list[Span], read: Any) -> list[Span]:
    """Poll ``read()`` until every expected span is there; return what was read."""
    wanted = {s["span_id"] for s in expected}

    def complete() -> list[Span] | None:
        spans = read()
        return spans if wanted <= {s["span_id"] for s in spans} else None

    return wait_until(complete, f"{len(wanted)} spans at the receiver", timeout=ARRIVAL_TIMEOUT, every=0.1)


def expected_phases(handoff: Span) -> set[str]:
    attributes = handoff["attributes"]
    leaving = (
        {sc.SPAN_DRAIN, sc.SPAN_CLOSE} if attributes[sc.PREVIOUS_ACTIVITY] == sc.CLOSE else {sc.SPAN_PAUSE}
    )
    entering = {sc.SPAN_START} if attributes[sc.NEW_ACTIVITY] == sc.START else {sc.SPAN_RESUME}
    return leaving | entering


def phase_names(spans: list[Span], handoff: Span) -> set[str]:
    """The handoff's phases: its phase children, and (LiveKit 1.8.2+) each phase whose LiveKit span
    stood for it under the handoff (``PhaseSpec.framework_span``), its seconds on the handoff."""
    below, found = [handoff["span_id"]], set()
    while below:
        parent = below.pop()
        for span in spans:
            if span["parent_id"] == parent:
                found.add(span["name"])
                if not span["name"].startswith(sc.SPAN_HANDOFF):  # LiveKit's subtree, ours is flat
                    below.append(span["span_id"])
    stood_for = {
        spec.span
        for spec in sc.PHASE_REGISTRY
        if spec.framework_span in found and spec.duration_attribute in handoff["attributes"]
    }
    return {name for name in found if name.startswith(sc.SPAN_HANDOFF + ".")} | stood_for


def check_handoff_tree(spans: list[Span]) -> list[Span]:
    """Every agent_handoff has its phases (children, or LiveKit's spans under it) and hangs, in one
    trace, off LiveKit's session span."""
    by_id = {s["span_id"]: s for s in spans}
    handoffs = [s for s in spans if s["name"] == sc.SPAN_HANDOFF]
    assert handoffs, "no agent_handoff span arrived"
    for handoff in handoffs:
        children = phase_names(spans, handoff)
        assert expected_phases(handoff) <= children, (handoff["attributes"], children)
        for child in (s for s in spans if s["parent_id"] == handoff["span_id"]):
            assert child["trace_id"] == handoff["trace_id"]
        ancestor = handoff
        for _ in range(100):
            if ancestor["parent_id"] is None:
                break
            parent = by_id.get(ancestor["parent_id"])
            assert parent is not None, f"parent {ancestor['parent_id']} of {ancestor['name']} did not arrive"
            assert parent["trace_id"] == handoff["trace_id"]
            ancestor = parent
        assert ancestor["name"] == LIVEKIT_ROOT, f"a handoff's root is {ancestor['name']}"
    return handoffs


def check_intact(expected: list[Span], received: list[Span]) -> None:
    """Ids, names and parents of every span; attributes and status of ours, exactly."""
    by_id = {s["span_id"]: s for s in received}
    for span in expected:
        got = by_id[span["span_id"]]
        assert (got["trace_id"], got["parent_id"], got["name"]) == (
            span["trace_id"],
            span["parent_id"],
            span["name"],
        )
        if span["name"].startswith(sc.SPAN_HANDOFF):
            assert got["attributes"] == span["attributes"], span["name"]
            assert got["status"] == span["status"], span["name"]
    check_handoff_tree([by_id[s["span_id"]] for s in expected])
