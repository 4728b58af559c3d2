"""A receiver that accepts the connection and never answers (a hung collector, a stuck proxy, a full
queue), over HTTP and gRPC, in plain text and with a TLS handshake that never completes, and one
that answers too late: the exit stays bounded, one line says what was lost and why, a
millisecond-looking timeout is named, and ``doctor`` reports it.

The receiver is a socket on 127.0.0.1 that listens and never accepts: the kernel completes the
connection, nobody ever reads or answers. The exit's bound is read off its own waits (each has a
timeout, 1.5 s in all: ``support.assert_exit_bounded``), not a clock a loaded machine moves; the
SDK alone would wait 30 s per export with the timeout set here.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support import assert_exit_bounded, run_exit_app

SDK_TIMEOUT = "30"  # seconds the SDK would wait per export (and its retries) without our bound


@pytest.fixture
def hung() -> Iterator[str]:
    """host:port of a receiver that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # the kernel accepts; nobody reads, nobody answers
        yield f"127.0.0.1:{listener.getsockname()[1]}"


PROTOCOLS = {"grpc": {}, "http/protobuf": {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}}


@pytest.mark.parametrize("scheme", ["http", "https"])  # https: a TLS handshake that never completes
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_exit_is_bounded_and_says_what_was_lost(hung: str, protocol: str, scheme: str) -> None:
    endpoint = f"{scheme}://{hung}"
    settings = {**PROTOCOLS[protocol], "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
    _, result = run_exit_app(OTEL_EXPORTER_OTLP_TIMEOUT=SDK_TIMEOUT, **settings)
    assert result.returncode == 0 and "done" in result.stdout, result.stderr[-2000:]
    lost = [line for line in result.stderr.splitlines() if "not delivered" in line]
    assert len(lost) == 1, result.stderr
    assert "3 span(s) were not delivered" in lost[0] and endpoint in lost[0]
    # what to do: the variable that set the endpoint, and the tool that checks it
    assert lost[0].endswith("; check OTEL_EXPORTER_OTLP_ENDPOINT, or run `otel-handoff doctor`."), lost[0]
    assert_exit_bounded(result.stderr)


def test_a_slow_receiver_gets_a_second_then_the_exit_goes_on() -> None:
    """A receiver that answers, but only after 20 s (an overloaded collector): bounded all the same."""
    import http.server
    import threading

    release = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            release.wait(20)  # answers late (or when the test ends)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        _, result = run_exit_app(
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_TIMEOUT=SDK_TIMEOUT,
        )
    finally:
        release.set()
        server.shutdown()
    lost = [line for line in result.stderr.splitlines() if "not delivered" in line]
    assert len(lost) == 1 and f"no answer from {endpoint}" in lost[0], result.stderr
    assert_exit_bounded(result.stderr)


def test_a_millisecond_timeout_is_named_and_the_exit_still_bounded(hung: str) -> None:
    """10000 is the spec's 10 s in milliseconds; the Python SDK waits 10000 s per export."""
    _, result = run_exit_app(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{hung}", OTEL_EXPORTER_OTLP_TIMEOUT="10000")
    named = [line for line in result.stderr.splitlines() if "OTEL_EXPORTER_OTLP_TIMEOUT" in line]
    assert len(named) == 1, result.stderr
    assert "reads as seconds" in named[0] and "OTEL_EXPORTER_OTLP_TIMEOUT=10 " in named[0]
    assert any("not delivered" in line for line in result.stderr.splitlines())
    assert_exit_bounded(result.stderr)


def test_a_plausible_timeout_is_not_named() -> None:
    _, result = run_exit_app(OTEL_TRACES_EXPORTER="none", OTEL_EXPORTER_OTLP_TIMEOUT="10")
    assert "OTEL_EXPORTER_OTLP_TIMEOUT" not in result.stderr


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_doctor_names_a_receiver_that_does_not_answer(hung: str, protocol: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        **PROTOCOLS[protocol],
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{hung}",
        "OTEL_METRICS_EXPORTER": "none",
    }
    result = subprocess.run(
        [sys.executable, "-m", "otel_handoff", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1, result.stdout
    assert "accepts connections but sent no answer in 2 s" in result.stdout
    assert "fix: restart the receiver there" in result.stdout


@pytest.fixture
def http1_receiver() -> Iterator[str]:
    """An endpoint that speaks HTTP/1.1 only, as an OTLP/HTTP port does (it answers 404 here)."""
    import http.server
    import threading

    class Http1(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Http1)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


FIX = "set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, or use the receiver's gRPC port (4317)"


def test_grpc_at_an_http_port_is_told_its_fix(http1_receiver: str) -> None:
    """The usual first mistake: the default gRPC exporter pointed at an OTLP/HTTP port."""
    _, result = run_exit_app(OTEL_EXPORTER_OTLP_ENDPOINT=http1_receiver)
    told = [line for line in result.stderr.splitlines() if line.startswith("otel-handoff:")]
    assert told and all(FIX in line for line in told), result.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": http1_receiver, "OTEL_METRICS_EXPORTER": "none"}
    doctor = subprocess.run(
        [sys.executable, "-m", "otel_handoff", "doctor"], env=env, capture_output=True, text=True, timeout=60
    )
    assert doctor.returncode == 1 and FIX in doctor.stdout, doctor.stdout
