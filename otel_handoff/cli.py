"""The ``otel-handoff`` command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from .version import __version__

_NEEDS_LIVEKIT = "otel-handoff demo needs livekit-agents: pip install 'otel-handoff[livekit]'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-handoff", description="OpenTelemetry tracing of agent handoffs."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo = commands.add_parser(
        "demo",
        help="run a traced multi-agent LiveKit session offline and print its handoffs",
        description=(
            "Run a real LiveKit AgentSession offline (no room, no keys) through tool transfers, "
            "an AgentTask and realtime-session reuse, and print a waterfall of each handoff. "
            "Spans also go to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set."
        ),
    )
    demo.add_argument("--export", metavar="FILE", help="also write the spans to FILE as OTLP JSON Lines")
    return parser


def _use_color() -> bool:
    """Colour only for a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _demo(args: argparse.Namespace) -> int:
    try:
        import livekit.agents  # noqa: F401
    except ImportError as exc:
        if not (exc.name or "").startswith("livekit"):
            raise
        print(_NEEDS_LIVEKIT, file=sys.stderr)
        return 2

    from ._waterfall import render_handoffs
    from .demo import DemoSetupError, run_demo

    try:
        result = asyncio.run(run_demo(export_path=args.export))
    except DemoSetupError as exc:
        print(f"otel-handoff demo: {exc}", file=sys.stderr)
        return 2
    print(render_handoffs(result.spans, color=_use_color()), end="")
    note = result.shutdown()
    if note:
        print(note)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-handoff`` console script and ``python -m otel_handoff``."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return 2  # pragma: no cover - argparse rejects unknown commands
