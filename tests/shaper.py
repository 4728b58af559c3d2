"""A shaped link between two network namespaces, where the kernel has no netem.

``CONFIG_NET_SCH_NETEM`` is not set on our machines (``tc qdisc add … netem``: "Specified qdisc kind
is unknown"), and ``tbf``/``htb`` add no delay or jitter. So a call's media crosses a middle
namespace (the "wire") through two veth pairs, and this forwarder in it does what netem would: it
reads each Ethernet frame from one veth (a raw packet socket), holds it for the link's one-way
delay (half the round trip) ± a uniform jitter, drops it at random (never ARP: a dropped ARP is
not a dropped packet of the call), and writes it to the other veth. Each frame is timed on its
own, so frames overtake one another as with netem.

A forwarder in user space sends late at times (up to ~3 ms at the 95th percentile on a loaded
2-core machine), so it records what it applied: per frame, its direction, its arrival (wall
clock), the delay it meant and the delay it gave, or that it was dropped. On SIGTERM it writes that
record as JSON and exits.

:func:`wire` builds the topology; ``python shaper.py A B RTT JITTER LOSS SEED RECORD`` runs the
forwarder (in the wire namespace). Needs root and iproute2's ``ip``.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import netns

ETH_P_ALL = 0x0003
ETH_P_ARP = 0x0806
PACKET_OUTGOING = 4  # a frame this socket's own interface sends: ours, not one to forward
# the veths must hand the forwarder whole frames with their checksums filled in: with checksum
# and segmentation offloads on, a frame read from a packet socket may be a 64 KB TCP segment or
# carry a checksum the receiving end would have completed (ethtool's ioctls; no ethtool here)
_SIOCETHTOOL = 0x8946
_ETHTOOL_OFF = (0x17, 0x19, 0x1F, 0x24, 0x2C)  # set: tx checksum, scatter-gather, TSO, GSO, GRO
RECORDED_KEYS = ("direction", "arrived_ns", "dropped", "meant_s", "applied_s")


@dataclass(frozen=True)
class Link:
    """A link as netem would shape it: each direction ``round_trip / 2 ± jitter`` (uniform), a frame
    lost with probability ``loss``."""

    name: str
    round_trip: float = 0.0  # seconds
    jitter: float = 0.0  # seconds, each way
    loss: float = 0.0  # 0..1, each way

    def describe(self) -> str:
        if not (self.round_trip or self.jitter or self.loss):
            return "unshaped"
        return (
            f"{self.round_trip * 1000:.0f} ms round trip, ±{self.jitter * 1000:.0f} ms jitter,"
            f" {self.loss * 100:.0f} % loss"
        )


def _ethtool_off(name: str) -> None:
    """``ethtool -K NAME tx off sg off tso off gso off gro off``, through its ioctl."""
    import ctypes

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for command in _ETHTOOL_OFF:
            value = ctypes.create_string_buffer(struct.pack("II", command, 0))  # ethtool_value
            request = struct.pack("16sP16x", name.encode(), ctypes.addressof(value))  # ifreq
            with contextlib.suppress(OSError):  # a feature the device cannot change: never on
                fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, request)


def _ip(space: netns.Namespace, *args: str) -> None:
    command = ["nsenter", "-t", str(space.holder.pid), "--net", "ip", *args]
    subprocess.run(command, check=True, capture_output=True)


def _in(space: netns.Namespace, *command: str) -> None:
    subprocess.run(
        ["nsenter", "-t", str(space.holder.pid), "--net", *command], check=True, capture_output=True
    )


def wire(
    near: netns.Namespace,
    far: netns.Namespace,
    middle: netns.Namespace,
    prefix: str,
    addresses: tuple[str, str],
) -> tuple[str, str]:
    """Two veth pairs, ``near``'s and ``far``'s, their other ends in ``middle``; ``addresses``
    (``10.x.y.z``, one /24) on the near and far ends. Returns the middle's two interface names."""
    names = []
    for side, space, address in (("a", near, addresses[0]), ("b", far, addresses[1])):
        inner, outer = f"{prefix}{side}0", f"{prefix}{side}1"
        _ip(space, "link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip(space, "link", "set", outer, "netns", str(middle.holder.pid))
        _ip(space, "addr", "add", f"{address}/24", "dev", inner)
        _in(space, sys.executable, __file__, "offload-off", inner)
        _ip(space, "link", "set", inner, "up")
        _ip(middle, "link", "set", outer, "promisc", "on")
        _in(middle, sys.executable, __file__, "offload-off", outer)
        _ip(middle, "link", "set", outer, "up")
        names.append(outer)
    _in(middle, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    return names[0], names[1]


def start(middle: netns.Namespace, interfaces: tuple[str, str], link: Link, record: Path, seed: int) -> Any:
    """The forwarder for ``link`` between ``interfaces`` of ``middle``; stopped with it (SIGTERM
    writes ``record``)."""
    command = [
        *("nice", "-n", "-10", sys.executable, __file__, "forward", *interfaces),
        *(str(link.round_trip), str(link.jitter), str(link.loss), str(seed), str(record)),
    ]
    log = record.with_suffix(".log")
    process = middle.start(command, log)
    deadline = time.monotonic() + 30
    while "forwarding" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"the shaper did not start: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    return process


def read_record(record: Path) -> list[dict[str, Any]]:
    """The forwarder's frames: ``direction`` (0: near to far, 1: back), ``arrived_ns`` (wall
    clock), ``dropped``, ``meant_s`` and ``applied_s`` (its delay, meant and given; ``applied_s``
    None: dropped, or still held when the forwarder stopped)."""
    rows = json.loads(record.read_text())
    return [dict(zip(RECORDED_KEYS, row, strict=True)) for row in rows]


# --- the forwarder (run as `python shaper.py forward A B RTT JITTER LOSS SEED RECORD`) --------------
def _forward_main(a: str, b: str, rtt: float, jitter: float, loss: float, seed: int, record: str) -> None:
    rng = random.Random(seed)
    sockets = []
    for name in (a, b):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        sock.bind((name, 0))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sockets.append(sock)
    rows: list[list[Any]] = []
    lock = threading.Lock()

    def direction(number: int, source: socket.socket, target: socket.socket) -> None:
        queue: list[tuple[float, int, bytes, int]] = []
        ready = threading.Condition()

        def send() -> None:
            while True:
                with ready:
                    while not queue or queue[0][0] > time.monotonic():
                        ready.wait(None if not queue else queue[0][0] - time.monotonic())
                    due, _, frame, row = heapq.heappop(queue)
                sent = time.monotonic()
                target.send(frame)
                with lock:
                    rows[row][4] = rows[row][3] + sent - due

        threading.Thread(target=send, daemon=True).start()
        count = 0
        while True:
            frame, address = source.recvfrom(65536)
            if address[2] == PACKET_OUTGOING:
                continue
            arrived, wall = time.monotonic(), time.time_ns()
            ether = int.from_bytes(frame[12:14], "big")
            dropped = ether != ETH_P_ARP and rng.random() < loss
            delay = max(0.0, rtt / 2 + rng.uniform(-jitter, jitter)) if jitter else rtt / 2
            with lock:
                rows.append([number, wall, dropped, delay, None])
                row = len(rows) - 1
            if dropped:
                continue
            count += 1
            with ready:
                heapq.heappush(queue, (arrived + delay, count, frame, row))
                ready.notify()

    def finish(*_: Any) -> None:
        with lock:
            Path(record).write_text(json.dumps(rows))
        os._exit(0)

    signal.signal(signal.SIGTERM, finish)
    for number, (source, target) in enumerate(((sockets[0], sockets[1]), (sockets[1], sockets[0]))):
        threading.Thread(target=direction, args=(number, source, target), daemon=True).start()
    print("forwarding", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    if sys.argv[1:2] == ["offload-off"]:
        _ethtool_off(sys.argv[2])
    elif sys.argv[1:2] == ["forward"] and len(sys.argv) == 9:
        a, b, rtt, jitter, loss, seed, record = sys.argv[2:]
        _forward_main(a, b, float(rtt), float(jitter), float(loss), int(seed), record)
    else:
        sys.exit("usage: shaper.py offload-off IFACE | forward A B RTT JITTER LOSS SEED RECORD")
