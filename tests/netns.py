"""Receivers in a network namespace of their own, reached through ports the OS assigned.

A receiver that cannot report a port-0 bind (Jaeger, a collector, Prometheus, Phoenix's gRPC
port) still never listens on a guessed port here: it runs inside a private network namespace
(``unshare -n``, only ``lo`` up) on the fixed ports its shipped configuration names, and
:func:`relay` forwards loopback ports of the test machine, bound to port 0, into it. Several
receivers share one :class:`Namespace`, each on a loopback address of its own that
``/etc/hosts`` (bind-mounted in a private mount namespace) names as docker-compose does:
``jaeger``, ``otel-collector``, ``prometheus``. Nothing listens beyond the namespace.

Needs root (CI runs as root) and util-linux's ``unshare``/``nsenter``, iproute2's ``ip``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# compose's service names, each on a loopback address of its own inside a Namespace
HOSTS = {
    "localhost": "127.0.0.1",
    "jaeger": "127.0.0.2",
    "otel-collector": "127.0.0.3",
    "prometheus": "127.0.0.4",
    "tempo": "127.0.0.5",
}


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "a private network namespace needs root (unshare -n)"
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (util-linux, iproute2)"
    return None


@dataclass
class Namespace:
    """A private network + mount namespace held open by a sleeping process; programs join it."""

    holder: subprocess.Popen[bytes]
    workdir: Path
    relays: list[subprocess.Popen[bytes]] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def create(cls, workdir: Path) -> Namespace:
        workdir.mkdir(parents=True, exist_ok=True)
        hosts = workdir / "hosts"
        hosts.write_text("".join(f"{address} {name}\n" for name, address in HOSTS.items()))
        script = f"mount --bind {hosts} /etc/hosts && ip link set lo up && echo ready && exec sleep 86400"
        holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "sh", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        assert holder.stdout is not None
        line = holder.stdout.readline().decode(errors="replace").strip()
        if line != "ready":
            rest = holder.stdout.read().decode(errors="replace") if holder.poll() is not None else ""
            holder.kill()
            raise AssertionError(f"cannot make a network namespace: {line} {rest}".strip())
        return cls(holder, workdir)

    def start(
        self, command: Sequence[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` inside the namespace, its output to ``log``; stopped with the namespace."""
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["nsenter", "-t", str(self.holder.pid), "--net", "--mount", f"--wd={self.workdir}", *command],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self.processes.append(process)
        return process

    def expose(self, *targets: str) -> list[int]:
        """Loopback ports here (OS-assigned) forwarding to ``host:port`` targets in the namespace."""
        process = relay(self.holder.pid, [f"0:{_address(target)}" for target in targets])
        self.relays.append(process)
        assert process.stdout is not None
        ready = process.stdout.readline().decode(errors="replace").split()
        if ready[:2] != ["relay", "ready"]:
            raise AssertionError(f"relay failed: {ready} {process.stdout.read(2000)!r}")
        return [int(port) for port in ready[2:]]

    def reach_home(self, inside: str, home_port: int) -> None:
        """``inside`` (``host:port`` in the namespace) forwards to 127.0.0.1:``home_port`` here."""
        host, _, port = _address(inside).rpartition(":")
        process = relay(self.holder.pid, [f"{port}:{host}:{home_port}"], inward=True)
        self.relays.append(process)
        assert process.stdout is not None
        ready = process.stdout.readline().decode(errors="replace").split()
        if ready[:2] != ["relay", "ready"]:
            raise AssertionError(f"relay failed: {ready} {process.stdout.read(2000)!r}")

    def stop(self) -> None:
        for process in [*reversed(self.processes), *self.relays]:
            stop(process)
        stop(self.holder)


def _address(target: str) -> str:
    host, _, port = target.rpartition(":")
    return f"{HOSTS.get(host, host)}:{port}"


def stop(process: subprocess.Popen[Any] | None, timeout: float = 10.0) -> None:
    """Stop one process we started, by its PID: SIGTERM, then SIGKILL after ``timeout``."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout)


def relay(pid: int, mappings: list[str], inward: bool = False) -> subprocess.Popen[bytes]:
    """A relay process: ``PORT:HOST:TARGET`` (or ``PORT:TARGET`` for 127.0.0.1) per mapping.

    Outward (the default) it listens here on 127.0.0.1:PORT (0: any free port) and connects to
    HOST:TARGET inside ``pid``'s namespace; ``inward``, it listens inside on HOST:PORT and connects
    here to HOST:TARGET. Its first line of output is ``relay ready PORT...``."""
    return subprocess.Popen(
        [sys.executable, __file__, "relay-in" if inward else "relay", str(pid), *mappings],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


# --- the relay (run as `python netns.py relay PID PORT:[HOST:]TARGET ...`) -------------------------
def _enter_network_namespace(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, os.CLONE_NEWNET)
            return
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))
    finally:
        os.close(fd)


def _relay_main(pid: int, mappings: list[str], inward: bool) -> None:
    """Listen in one network namespace, connect in the other.

    Sockets stay in the namespace they were created in, so one process bridges the two. Outward:
    listen here on 127.0.0.1, then enter ``pid``'s namespace, where each connection goes on to
    HOST:TARGET. Inward: enter it, listen on HOST there, come back, connect here to HOST:TARGET.
    """
    import asyncio

    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    if inward:
        _enter_network_namespace(f"/proc/{pid}/ns/net")
    listeners = []
    for mapping in mappings:
        port, *host, target = mapping.split(":")
        address = host[0] if host else "127.0.0.1"
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address if inward else "127.0.0.1", int(port)))
        sock.listen(128)
        listeners.append((sock, "127.0.0.1" if inward else address, int(target)))
    _enter_network_namespace(f"/proc/self/fd/{home}" if inward else f"/proc/{pid}/ns/net")

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    def handler(host: str, target: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(host, target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
            for w in (writer, up_writer):
                w.close()

        return handle

    async def main() -> None:
        servers = [
            await asyncio.start_server(handler(host, target), sock=sock) for sock, host, target in listeners
        ]
        ports = " ".join(str(sock.getsockname()[1]) for sock, _, _ in listeners)
        print(f"relay ready {ports}", flush=True)
        await asyncio.gather(*(server.serve_forever() for server in servers))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(main())


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] in ("relay", "relay-in"):
        _relay_main(int(sys.argv[2]), sys.argv[3:], inward=sys.argv[1] == "relay-in")
    else:
        sys.exit("usage: netns.py relay|relay-in PID PORT:[HOST:]TARGET...")
