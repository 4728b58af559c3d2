"""The ``otel-handoff`` command line."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence

from ..core.frameworks import BY_KEY, FRAMEWORKS, names
from ..version import __version__
from .summary import FORMATS

# the demo of each framework (by registry key): its runner module, its coroutine function, and
# what it runs, for --help; a test holds it to the registry
_DEMOS = {
    "livekit": ("demo", "run_demo", "a LiveKit AgentSession: tool transfers, an AgentTask, update_agent()"),
    "ag2": ("demo_ag2", "run_ag2_demo", "ag2 1.x workflow channels"),
    "pipecat": ("demo_pipecat", "run_pipecat_demo", "a Pipecat Flows conversation"),
    "openai-agents": (
        "demo_openai_agents",
        "run_openai_agents_demo",
        "an OpenAI Agents SDK text run and realtime session",
    ),
    "google-adk": ("demo_google_adk", "run_google_adk_demo", "a Google ADK text run and live session"),
    "langgraph": ("demo_langgraph", "run_langgraph_demo", "a LangGraph swarm and supervisor delegation"),
    "llama-index": (
        "demo_llama_index",
        "run_llama_index_demo",
        "a LlamaIndex AgentWorkflow handoff and a refused one",
    ),
    "strands": (
        "demo_strands",
        "run_strands_demo",
        "a Strands Agents swarm handoff with its drain and without",
    ),
    "agent-framework": (
        "demo_agent_framework",
        "run_agent_framework_demo",
        "a Microsoft Agent Framework HandoffBuilder handoff, and one with checkpointing",
    ),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-handoff", description=f"OpenTelemetry tracing of agent handoffs in {names()}."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    default = FRAMEWORKS[0].key
    demo = commands.add_parser(
        "demo",
        help=f"run a traced multi-agent app offline ({names()}) and print its handoffs",
        description=(
            f"Run a real multi-agent app of one framework offline — {names()} — with only the "
            "model edges scripted (no server, no keys), and print a waterfall of each handoff. "
            "Spans also go to OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set."
        ),
    )
    demo.add_argument("--export", metavar="FILE", help="also write the spans to FILE as OTLP JSON Lines")
    demo.add_argument(
        "--framework",
        choices=[framework.key for framework in FRAMEWORKS],
        default=default,
        help="; ".join(
            f"{framework.key}{' (default)' if framework.key == default else ''}: "
            + _DEMOS.get(framework.key, ("", "", framework.title))[2]  # the help stands without a demo
            for framework in FRAMEWORKS
        ),
    )
    summary = commands.add_parser(
        "summary",
        help="summarize exported handoff spans per agent pair: counts, p50/p95/max per phase, reuse",
        description=(
            "Read agent_handoff spans from an OTLP JSON file (JSON Lines as `demo --export` and the "
            "Collector's file exporter write, or ConsoleSpanExporter output; '-' reads standard input), "
            "from Phoenix (http://HOST:6006/v1/projects/PROJECT/spans) or from Jaeger "
            "(http://HOST:16686/api/traces?service=NAME), and print per from → to pair: count, "
            "outcomes, reuse rates and p50/p95/max of the handoff and of each phase. Percentiles are "
            "nearest-rank. Exit status: 0 summary printed, 1 no handoff spans, 2 unreadable input."
        ),
    )
    summary.add_argument(
        "source", metavar="FILE|URL", help="an OTLP JSON file, '-', or a Phoenix or Jaeger URL"
    )
    summary.add_argument(
        "--format",
        choices=FORMATS,
        default="table",
        help="table (for people, with a chart), json or csv (for machines, times in seconds)",
    )
    summary.add_argument(
        "--chart", action="store_true", help="print only the bar chart of mean phase time per pair"
    )
    summary.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header for a backend that wants credentials (repeatable), e.g. "
        "'Authorization=Bearer …'; also OTEL_HANDOFF_SUMMARY_HEADERS (name=value,name=value), "
        "PHOENIX_API_KEY, or user:password@ in the URL",
    )
    commands.add_parser(
        "doctor",
        help="check this environment: frameworks and what they require, auto-instrumentation, exporter, "
        "endpoint",
        description=(
            "Print what handoff tracing would do here: framework versions and whether they are "
            "supported, whether what the installed frameworks require is installed (as pip check: "
            "frameworks that cannot share an environment are named, with the fix), which "
            "instrumentors are active or disabled and why, the provider and exporters "
            "that would be used, the endpoint and protocol and whether the endpoint answers. Exits 1 "
            "on a misconfiguration, with a one-line fix for each problem."
        ),
    )
    return parser


def _use_color() -> bool:
    """Colour only for a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _demo(args: argparse.Namespace) -> int:
    framework = BY_KEY[args.framework]
    module, function, _ = _DEMOS[args.framework]
    try:  # the demo module imports its framework (and quiets its log first, where it has one)
        runner = importlib.import_module(f"{__name__}.{module}")
        importlib.import_module(framework.demo_module)
    except ImportError as exc:
        if not (exc.name or "").startswith(framework.demo_module.partition(".")[0]):
            raise
        needs = " or ".join(framework.extra_requires)
        print(
            f"otel-handoff demo --framework {framework.key} needs {needs}: {framework.install_hint}",
            file=sys.stderr,
        )
        return 2

    from .demo_export import DemoSetupError
    from .waterfall import render_handoffs

    run = getattr(runner, function)
    try:
        result = asyncio.run(run(export_path=args.export))
    except DemoSetupError as exc:
        print(f"otel-handoff demo: {exc}", file=sys.stderr)
        return 2
    try:
        print(
            render_handoffs((*result.spans, *result.served), color=_use_color(), labels=result.labels), end=""
        )
    finally:  # whatever happens to the output, the spans still go where they were sent
        note = result.shutdown()
    if note:
        print(note)
    return 0


SUMMARY_HEADERS = "OTEL_HANDOFF_SUMMARY_HEADERS"


def _summary_headers(given: Sequence[str]) -> dict[str, str] | None:
    """OTEL_HANDOFF_SUMMARY_HEADERS (read by the SDK's own parser, as OTEL_EXPORTER_OTLP_HEADERS),
    then each ``--header``; None after one line saying which is malformed (never its value)."""
    from opentelemetry.util.re import parse_env_headers

    headers = parse_env_headers(os.environ.get(SUMMARY_HEADERS, ""), liberal=True)
    for number, header in enumerate(given, 1):
        name, equals, value = header.partition("=")
        if not equals or not name.strip():
            print(
                f"otel-handoff summary: --header number {number} is not NAME=VALUE "
                "(e.g. --header 'Authorization=Bearer …')",
                file=sys.stderr,
            )
            return None
        headers[name.strip()] = value.strip()
    return headers


def _summary(args: argparse.Namespace) -> int:
    from .summary import run

    headers = _summary_headers(args.header)
    if headers is None:
        return 2
    code, output, message = run(
        args.source, output_format=args.format, chart_only=args.chart, headers=headers
    )
    print(output, end="")
    if message:
        print(message, file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``otel-handoff`` console script and ``python -m otel_handoff``."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # now, not at exit, so that a reader gone away is caught here
        return code
    except BrokenPipeError:
        # the reader went away (`otel-handoff summary FILE | head`): no traceback, and nothing more
        # written to the closed pipe when Python flushes at exit (the recipe of Python's docs)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command == "doctor":
        from .doctor import main as doctor

        return doctor()
    if args.command == "summary":
        if args.chart and args.format != "table":
            parser.error("--chart is the people's view: use it without --format json or csv")
        return _summary(args)
    return 2  # pragma: no cover - argparse rejects unknown commands
