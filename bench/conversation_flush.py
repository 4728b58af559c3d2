"""What the conversation-end flush costs a busy server and its collector (issue 50, item 2).

A real uvicorn server (one process, its port bound to 0) whose every request is one text
conversation of the OpenAI Agents SDK with a handoff (triage to billing, the SDK's own scripted
model, as ``tests/scripts/exit_app.py`` serves), set up with ``otel_handoff.configure()`` and
exporting over OTLP/gRPC (the default) to a real collector, ``otelcol-handoff`` (built by
``.ci/install-receivers.sh``) with an ``otlp`` receiver and a quiet ``debug`` exporter. A load
generator in a process of its own sends the requests at a fixed rate over keep-alive connections.
For each ``OTEL_HANDOFF_CONVERSATION_FLUSH`` (``always``, ``coalesced``, ``off``, and unset:
``auto``) at each rate:

* export requests a second and spans per request: the collector's own telemetry (gRPC ``Export``
  calls to the trace service, ``otelcol_receiver_accepted_spans``);
* the app's CPU per conversation: the server process's CPU time (``/proc``, every thread of it)
  over the run, divided by the conversations it served;
* the collector's CPU: its process's CPU time over the run, divided by the run's length;
* whether every span arrived: the spans of a conversation, times the conversations, against what
  the collector accepted once the server was stopped (SIGTERM).

The measured window is the load plus the batch processor's schedule delay and a second (so the
last batch of ``off`` is in it); the collector restarts for every run. Everything runs in a
private network namespace (``unshare -n``: root), where the collector listens on the fixed ports
its configuration names and nothing else can take them; the server binds port 0.

    python bench/conversation_flush.py                 # 10 and 200 a second, 60 s each, every mode: ~11 min
    python bench/conversation_flush.py --seconds 10    # a short run (printed, not kept)

A full run writes ``results/conversation_flush.{json,md}``; docs/export.md quotes them
(``tests/test_bench_results.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
MODES = ("always", "coalesced", "off", "auto")  # auto: the setting unset
RATES = (10, 200)
FULL_SECONDS = 60
SCHEDULE_DELAY = 5.0  # the batch processor's default (OTEL_BSP_SCHEDULE_DELAY), left as it is
OTLP_PORT, TELEMETRY_PORT = 4317, 8888  # inside the namespace only
CONNECTIONS = 64  # the load generator's keep-alive connections: at most this many in flight
WARM_UP = 20  # conversations before the window (imports, first export)
TRACE_EXPORT = 'rpc_service="opentelemetry.proto.collector.trace.v1.TraceService"'

COLLECTOR_CONFIG = f"""\
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{OTLP_PORT}
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    logs:
      level: warn  # the debug exporter logs through it: quiet, as a collector in production
    metrics:
      level: detailed  # the gRPC server's per-call metrics: the export requests
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {TELEMETRY_PORT}
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"""


# --- the app: one conversation per request ------------------------------------------------------
async def conversation() -> None:
    """triage hands off to billing, which answers: the SDK's own scripted models, no network."""
    from agents import Agent, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    billing = Agent(name="billing", model=ScriptedModel([[assistant_message("Billing here.")]]))
    triage = Agent(
        name="triage",
        handoffs=[billing],
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="call_1")]]),
    )
    result = await Runner.run(triage, "I was charged twice")
    assert result.last_agent.name == "billing"


def serve() -> None:
    """The server: ``configure()`` from the environment, then uvicorn on a port bound to 0."""
    import uvicorn
    from agents import set_trace_processors

    import otel_handoff
    from otel_handoff.core import delivery

    otel_handoff.configure()
    set_trace_processors([])  # no key, no network: the SDK's own export to OpenAI off
    body = b"billing"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await conversation()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print("listening", sock.getsockname()[1], delivery.flush_mode(), flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", backlog=4096)
    uvicorn.Server(config).run(sockets=[sock])


# --- the load generator: a process of its own ----------------------------------------------------
REQUEST = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.IGNORECASE)


async def load(port: int, rate: float, seconds: float) -> dict[str, Any]:
    """Requests at ``rate`` a second for ``seconds`` over keep-alive connections; a request not
    sent by the end (all connections busy) is dropped, so an overloaded server shows as a lower
    achieved rate, not as a backlog that runs on."""
    loop = asyncio.get_running_loop()
    idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    connections = min(CONNECTIONS, max(4, int(rate)))
    for _ in range(connections):
        idle.put_nowait(await asyncio.open_connection("127.0.0.1", port))
    latencies: list[float] = []
    failures = {"errors": 0, "unsent": 0}
    stopped = asyncio.Event()

    async def one() -> None:
        reader, writer = await idle.get()
        try:
            if stopped.is_set():
                failures["unsent"] += 1
                return
            sent = loop.time()
            writer.write(REQUEST)
            head = await reader.readuntil(b"\r\n\r\n")
            length = _LENGTH.search(head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            if not head.startswith(b"HTTP/1.1 200"):
                failures["errors"] += 1
                return
            latencies.append(loop.time() - sent)
        finally:
            idle.put_nowait((reader, writer))

    start = loop.time()
    tasks = []
    for i in range(int(rate * seconds)):
        delay = start + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.sleep(max(0.0, start + seconds - loop.time()))
    stopped.set()
    await asyncio.gather(*tasks)
    elapsed = loop.time() - start
    latencies.sort()
    quantile = (lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]) if latencies else None
    return {
        "asked": len(tasks),
        "served": len(latencies),
        **failures,
        "elapsed": elapsed,
        "latency_p50_ms": quantile(0.5) * 1000 if quantile else None,
        "latency_p95_ms": quantile(0.95) * 1000 if quantile else None,
    }


# --- the run ---------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User plus system CPU time of every thread of ``pid`` (``/proc/PID/stat``), or of one."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def telemetry() -> dict[str, float]:
    """The collector's accepted spans and gRPC export calls to its trace service, so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{TELEMETRY_PORT}/metrics", timeout=5) as response:
        text = response.read().decode()
    spans = requests = 0.0
    for line in text.splitlines():
        if line.startswith("otelcol_receiver_accepted_spans"):
            spans += float(line.rsplit(" ", 1)[1])
        elif line.startswith("rpc_server_duration_milliseconds_count{") and TRACE_EXPORT in line:
            requests += float(line.rsplit(" ", 1)[1])
    return {"spans": spans, "requests": requests}


def wait_for(check: Any, what: str, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it is true (the collector says so only when asked)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except OSError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise SystemExit(f"conversation_flush: {what} did not happen within {timeout:g} s")
        time.sleep(0.05)


def delivered_spans(expected: float, timeout: float = 10.0) -> float:
    """The spans the collector accepted, once ``expected`` or at ``timeout``."""
    deadline = time.monotonic() + timeout
    while (spans := telemetry()["spans"]) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return spans


def stop(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def load_process(port: int, rate: float, seconds: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "load", str(port), str(rate), str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def one_run(collector: str, workdir: Path, mode: str, rate: float, seconds: float) -> dict[str, Any]:
    config = workdir / "collector.yaml"
    config.write_text(COLLECTOR_CONFIG)
    with (workdir / f"collector-{mode}-{rate:g}.log").open("wb") as log:
        otelcol = subprocess.Popen([collector, f"--config={config}"], stdout=log, stderr=subprocess.STDOUT)
    server = None
    try:
        wait_for(lambda: telemetry() is not None, "the collector's telemetry endpoint")
        env = {
            **os.environ,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{OTLP_PORT}",
            "OTEL_METRICS_EXPORTER": "none",  # trace exports only: what the flush governs
            "OTEL_SERVICE_NAME": "conversation-flush-bench",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        env.pop("OTEL_HANDOFF_CONVERSATION_FLUSH", None)
        if mode != "auto":
            env["OTEL_HANDOFF_CONVERSATION_FLUSH"] = mode
        server = subprocess.Popen(
            [sys.executable, __file__, "serve"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        _, port, effective = server.stdout.readline().split()
        warm = load_process(int(port), WARM_UP / 2, 2)
        time.sleep(SCHEDULE_DELAY + 1)  # the warm-up's last batch out, whatever the mode
        per_conversation = telemetry()["spans"] / warm["served"]
        before = (time.monotonic(), cpu_seconds(server.pid), cpu_seconds(otelcol.pid), telemetry())
        loop_before = cpu_seconds(server.pid, server.pid)  # the main thread: uvicorn's event loop
        loadavg_before = os.getloadavg()
        result = load_process(int(port), rate, seconds)
        time.sleep(SCHEDULE_DELAY + 1)  # off: the batch timer's last export falls in the window
        after = (time.monotonic(), cpu_seconds(server.pid), cpu_seconds(otelcol.pid), telemetry())
        loop_after = cpu_seconds(server.pid, server.pid)
        stop(server)
        expected = per_conversation * (warm["served"] + result["served"])
        delivered = delivered_spans(expected)
    finally:
        if server is not None:
            stop(server)
        stop(otelcol)
    window = after[0] - before[0]
    requests = after[3]["requests"] - before[3]["requests"]
    spans = after[3]["spans"] - before[3]["spans"]
    served = result["served"]
    return {
        "mode": mode,
        "effective": effective,
        "rate": rate,
        "seconds": seconds,
        "achieved": served / result["elapsed"],
        "served": served,
        "unsent": result["unsent"],
        "errors": result["errors"],
        "window": window,
        "export_requests": requests,
        "spans_exported": spans,
        "app_cpu_seconds": after[1] - before[1],
        "collector_cpu_seconds": after[2] - before[2],
        "export_requests_per_second": requests / result["elapsed"],
        "spans_per_request": spans / requests if requests else None,
        "spans_per_conversation": per_conversation,
        "app_cpu_ms_per_conversation": (after[1] - before[1]) * 1000 / served,
        "off_loop_cpu_ms_per_conversation": (after[1] - before[1] - loop_after + loop_before) * 1000 / served,
        "collector_cpu_percent": (after[2] - before[2]) * 100 / window,
        "latency_p50_ms": result["latency_p50_ms"],
        "latency_p95_ms": result["latency_p95_ms"],
        "delivered": delivered == expected,
        "loadavg": [round(loadavg_before[0], 2), round(os.getloadavg()[0], 2)],
    }


def render(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| conversations / s asked | achieved | `OTEL_HANDOFF_CONVERSATION_FLUSH` | export requests / s "
        "| spans / request | app CPU ms / conversation (off the event loop) | collector CPU "
        "| latency p50 / p95 ms | all delivered |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    lines += [row_cells(row) for row in rows]
    lines += [
        "",
        "Load average (1 min) at each run's start and end: "
        + ", ".join(f"{r['rate']:g}/s {r['mode']} {r['loadavg'][0]} to {r['loadavg'][1]}" for r in rows)
        + ".",
    ]
    return "\n".join(lines) + "\n"


def row_cells(row: dict[str, Any]) -> str:
    """One run as the results and docs/export.md write it."""
    mode = row["mode"] if row["mode"] != "auto" else f"auto ({row['effective']})"
    per_request = f"{row['spans_per_request']:.1f}" if row["spans_per_request"] else "none"
    cpu = f"{row['app_cpu_ms_per_conversation']:.2f} ({row['off_loop_cpu_ms_per_conversation']:.2f})"
    return (
        f"| {row['rate']:g} | {row['achieved']:.1f} | {mode} | {row['export_requests_per_second']:.2f} | "
        f"{per_request} | {cpu} | {row['collector_cpu_percent']:.1f} % | "
        f"{row['latency_p50_ms']:.1f} / {row['latency_p95_ms']:.1f} | {'yes' if row['delivered'] else 'no'} |"
    )


def inside(args: argparse.Namespace) -> None:
    """The runs, in the private namespace: every mode at one rate, then the next rate."""
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="conversation-flush-") as tmp:
        for rate in args.rates:
            for mode in args.modes:
                row = one_run(args.collector, Path(tmp), mode, rate, args.seconds)
                print(row_cells(row), flush=True)
                rows.append(row)
    from importlib.metadata import version

    header = (
        f"`python bench/conversation_flush.py --seconds {args.seconds:g}` — "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {_commit()}\n\n"
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with other "
        f"work, CPython {platform.python_version()}, openai-agents {version('openai-agents')}, "
        f"opentelemetry-sdk {version('opentelemetry-sdk')}, uvicorn {version('uvicorn')}, "
        f"otelcol-handoff {_collector_version(args.collector)}; OTLP/gRPC, the batch processor's defaults; "
        f"{args.seconds:g} s per run."
    )
    text = render(rows, header)
    print(text)
    if args.seconds >= FULL_SECONDS:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "conversation_flush.md").write_text("# The conversation-end flush under load\n\n" + text)
        (RESULTS / "conversation_flush.json").write_text(json.dumps(rows, indent=2) + "\n")


def _commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "unknown"


def _collector_version(collector: str) -> str:
    out = subprocess.run([collector, "--version"], capture_output=True, text=True)
    return out.stdout.strip().rsplit(" ", 1)[-1] or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=FULL_SECONDS, help="per run (default 60)")
    parser.add_argument("--rates", type=lambda s: [float(r) for r in s.split(",")], default=list(RATES))
    parser.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    search = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    parser.add_argument("--collector", default=shutil.which("otelcol-handoff", path=search))
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if not args.collector:
        raise SystemExit("conversation_flush: no otelcol-handoff (bash .ci/install-receivers.sh .venv-test)")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        raise SystemExit("conversation_flush: needs root and `unshare` (a private network namespace)")
    command = [sys.executable, __file__, "--inside", "--collector", args.collector]
    command += ["--seconds", str(args.seconds), "--rates", ",".join(f"{r:g}" for r in args.rates)]
    command += ["--modes", ",".join(args.modes)]
    sys.exit(subprocess.run(["unshare", "--net", "--", *command]).returncode)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["load"]:
        print(json.dumps(asyncio.run(load(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])))))
    else:
        main()
