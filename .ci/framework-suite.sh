#!/usr/bin/env bash
# A framework's own test suite, run twice from its source release: plain, and with otel-handoff's
# instrumentation on (a pytest plugin instruments it at start-up, spans to memory). The two runs
# must end alike: the same failures (a release's own failures offline, without Docker services,
# are its own), the same counts, warnings included (one process: xdist would spread once-per-process
# warnings over its workers by chance). Not part of .ci/run (minutes of pip and tests); run it after a
# change to a framework's wrappers:
#
#   bash .ci/framework-suite.sh langgraph 1.2.24
#
# FRAMEWORK_SUITE_LOGS=<folder> keeps both runs' full logs there. FRAMEWORK_SUITE_TESTS="<paths>" runs
# those test paths instead of the recipe's; FRAMEWORK_SUITE_REF=<ref> takes the tests from that ref of
# a recipe's repository instead of the release's tag (where a clone lacks that tag; the tests run
# are then that ref's, not the release's); FRAMEWORK_SUITE_ARGS="<options>" adds pytest options to
# both runs (--noconftest where such a ref's conftest needs another release). A run where pytest
# counted nothing (its conftest failed to import, say) fails rather than ending "alike".
#
# Wired up: LangGraph, the OpenAI Agents SDK and Strands Agents (their source releases ship their
# tests; Pipecat's does not), Microsoft Agent Framework (from its repository's release tag:
# `bash .ci/framework-suite.sh agent-framework 1.13.0`; AGENT_FRAMEWORK_GIT names another clone) and
# LlamaIndex (llama-index-core's sdist ships no tests: its repository's tag v<release>, the folder
# llama-index-core; `bash .ci/framework-suite.sh llama-index 0.14.19`; LLAMA_INDEX_GIT names another clone)
# and Pipecat (pipecat-ai's sdist ships no tests: its repository's tag v<release>, the folder tests,
# run from the repository's root so its pytest settings apply; `bash .ci/framework-suite.sh pipecat 1.7.0`;
# PIPECAT_GIT names another clone) and LiveKit Agents (its sdist ships no tests, 2.0.0b1 no sdist at
# all: its repository's tag livekit-agents@<release>, its `--unit` category, no plugin installed;
# LIVEKIT_AGENTS_GIT names another clone; the copy we could reach ends after 1.7.0:
# `LIVEKIT_AGENTS_GIT=<clone> FRAMEWORK_SUITE_REF=main bash .ci/framework-suite.sh livekit-agents 1.8.9`).
# A test that needs a package the recipe leaves out fails to collect both ways alike.
set -euo pipefail
cd "$(dirname "$0")/.."
framework="${1:?framework (langgraph)}"
release="${2:?release, e.g. 1.2.24}"
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

pytest_args=()  # a recipe's own pytest options
case "$framework" in
  langgraph)
    deps=(pytest pytest-mock pytest-dotenv syrupy httpx "pytest-xdist[psutil]" pytest-repeat
          langgraph-prebuilt langgraph-checkpoint langgraph-checkpoint-sqlite
          langgraph-checkpoint-postgres langgraph-sdk "psycopg[binary]" pycryptodome redis)
    instrumentor="otel_handoff.langgraph:LangGraphHandoffInstrumentor"
    export NO_DOCKER=true  # no Redis or Postgres: those parametrizations are left out
    ;;
  openai-agents)
    deps=(pytest pytest-asyncio pytest-mock inline-snapshot "fastapi>=0.110,<1" aiosqlite fakeredis
          websockets graphviz rich textual cryptography eval-type-backport grpcio "aiohttp>=3.14.3,<4")
    instrumentor="otel_handoff.openai_agents:OpenAIAgentsHandoffInstrumentor"
    ;;
  strands)  # the distribution is strands-agents; its sdist ships its tests
    dist=strands-agents
    deps=(pytest pytest-asyncio pytest-timeout moto tenacity "opentelemetry-exporter-otlp<=1.45.1")
    instrumentor="otel_handoff.strands:StrandsHandoffInstrumentor"
    ;;
  agent-framework)  # its sdists ship no tests: the release's tag (python-<core release>) of its repository
    dist=agent-framework-core
    deps=(pytest pytest-asyncio pytest-timeout)
    instrumentor="otel_handoff.agent_framework:AgentFrameworkHandoffInstrumentor"
    git_source="${AGENT_FRAMEWORK_GIT:-https://github.com/microsoft/agent-framework}"
    tests=(packages/orchestrations/tests packages/core/tests/workflow)  # the handoff's, and the runner's
    git_tag="python-$release"
    git_folder=python
    ;;
  llama-index)  # its sdist ships no tests: the release's tag (v<release>) of its repository
    dist=llama-index-core
    # its dev group's test tools, at its pins, and what its conftest imports (openai)
    deps=("pytest~=7.2" "pytest-asyncio==0.21.0" "pytest-mock==3.11.1" pytest-timeout openai)
    instrumentor="otel_handoff.llama_index:LlamaIndexHandoffInstrumentor"
    git_source="${LLAMA_INDEX_GIT:-https://github.com/run-llama/llama_index}"
    git_tag="v$release"
    git_folder=llama-index-core
    # the tests import the installed release, not the tag's source tree (which lacks the tokenizer
    # cache the release bundles: tiktoken would download it); native tracebacks: pytest's own parse
    # of a deep recursion's frames fails inside CPython 3.11 (SystemError, the session ends)
    # a test that hangs offline (one of its multiprocessing tests, spawn children idle) fails after 120 s
    drop_source=llama_index
    pytest_args=(--tb=native --timeout=120)
    ;;
  pipecat)  # its sdist ships no tests: the release's tag (v<release>) of its repository
    # the workers' buses (Redis, pgmq, the websocket proxy) and the Flows tests' model services
    dist=pipecat-ai
    extras="[anthropic,google,redis,pgmq,websocket,runner]"
    deps=(pytest pytest-asyncio pytest-aiohttp python-dotenv)
    instrumentor="otel_handoff.pipecat:PipecatHandoffInstrumentor"
    git_source="${PIPECAT_GIT:-https://github.com/pipecat-ai/pipecat}"
    git_tag="v$release"
    git_folder=tests
    # from the repository's root: its pyproject's pytest settings (asyncio, warning filters) apply;
    # its pythonpath "src" is not checked out, so the tests import the installed release
    run_from_root=1
    ;;
  livekit-agents)  # its sdist ships no tests (2.0.0b1 has no sdist): its repository's tag livekit-agents@<release>
    deps=(pytest pytest-asyncio "pytest-asyncio-concurrent==0.5.2" pytest-timeout python-dotenv httpx)
    instrumentor="otel_handoff.livekit:LiveKitHandoffInstrumentor"
    our_extra=livekit  # otel-handoff's extra for it
    git_source="${LIVEKIT_AGENTS_GIT:-https://github.com/livekit/agents}"
    git_tag="livekit-agents@$release"
    git_folder=tests
    run_from_root=1  # its tests are a package run from the root (its pyproject: markers, pythonpath)
    tests=(tests)
    # its unit category, the tests that need no provider, no Docker (toxiproxy) and no network; its own
    # addopts again (the script clears them); native tracebacks, as for LlamaIndex (CPython 3.11's
    # SystemError); a test that hangs offline fails after 60 s
    pytest_args=(--import-mode=importlib -p tests.concurrency --unit --tb=native --timeout=60)
    ;;
  *) echo "framework-suite: no recipe for $framework" >&2; exit 2 ;;
esac
dist="${dist:-$framework}"
our_extra="${our_extra:-$framework}"
tests=("${tests[@]:-tests/}")
if [[ -n "${FRAMEWORK_SUITE_TESTS:-}" ]]; then read -r -a tests <<< "$FRAMEWORK_SUITE_TESTS"; fi
if [[ -n "${FRAMEWORK_SUITE_ARGS:-}" ]]; then read -r -a more <<< "$FRAMEWORK_SUITE_ARGS"; pytest_args+=("${more[@]}"); fi
git_tag="${FRAMEWORK_SUITE_REF:-${git_tag:-}}"

python3 -m venv "$work/venv"
if [[ -n "${git_source:-}" ]]; then
  # only the folder the tests are in (LlamaIndex's repository holds hundreds of integrations)
  git -c advice.detachedHead=false clone -q --depth 1 --no-checkout --branch "$git_tag" "$git_source" "$work/src"
  git -C "$work/src" sparse-checkout set "$git_folder"
  git -C "$work/src" -c advice.detachedHead=false checkout -q "$git_tag"
  source_dir="$work/src/$git_folder"
  if [[ -n "${run_from_root:-}" ]]; then source_dir="$work/src"; fi
  if [[ $framework == agent-framework ]]; then
    orchestrations="$(sed -n 's/^version = "\(.*\)"/\1/p' "$source_dir/packages/orchestrations/pyproject.toml")"
    deps+=("agent-framework-orchestrations==$orchestrations")
  fi
  "$work/venv/bin/pip" install -q "$dist${extras:-}==$release" "${deps[@]}" -e "$repo[$our_extra]"
  if [[ -n "${drop_source:-}" ]]; then rm -rf "${source_dir:?}/$drop_source"; fi
else
  "$work/venv/bin/pip" install -q "$dist==$release" "${deps[@]}" -e "$repo[$our_extra]"
  "$work/venv/bin/pip" download -q --no-deps --no-binary :all: -d "$work" "$dist==$release"
  tar xzf "$work"/*.tar.gz -C "$work"
  source_dir="$(find "$work" -maxdepth 1 -type d -name "*-$release" | head -n 1)"
fi
cat > "$work/otel_handoff_suite_plugin.py" <<EOF
"""Instrument $framework at pytest start-up (spans to memory)."""
import importlib

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def pytest_configure(config):
    module, _, name = "$instrumentor".partition(":")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    getattr(importlib.import_module(module), name)().instrument(tracer_provider=provider)
EOF

run() {  # $1: plain | traced
  local extra=()
  [[ $1 == traced ]] && extra=(-p otel_handoff_suite_plugin)
  (cd "$source_dir" && PYTHONPATH="$work" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
    -p no:xdist -o addopts="" --continue-on-collection-errors "${pytest_args[@]}" "${tests[@]}" "${extra[@]}" > "$work/$1.log" 2>&1) || true
  # pytest's short summary ("FAILED tests/x.py::t - why"), not captured log lines ("ERROR    asyncio:…")
  { grep -E '^(FAILED|ERROR) [^ ]' "$work/$1.log" || true; } | sed 's/ - .*//' | sort > "$work/$1.failed"  # none: fine
  # pytest's last line, or, where the interpreter's exit printed after it (a coroutine never
  # awaited, collected at exit), the counts line it printed last
  { grep -E ' in [0-9.]+s( \(|$)' "$work/$1.log" || true; } | tail -n 1 | sed -E 's/ in [0-9.]+s.*//' > "$work/$1.summary"
  echo "$1: $(cat "$work/$1.summary")"
  if [[ -n "${FRAMEWORK_SUITE_LOGS:-}" ]]; then mkdir -p "$FRAMEWORK_SUITE_LOGS" && cp "$work/$1.log" "$FRAMEWORK_SUITE_LOGS/"; fi
}
run plain
run traced
if [[ ! -s "$work/plain.summary" || ! -s "$work/traced.summary" ]]; then  # pytest never counted: nothing ran
  echo "framework-suite: $framework $release: no counts (pytest ended before running the tests; see the logs)"
  exit 1
fi
if diff -u "$work/plain.failed" "$work/traced.failed" && diff -u "$work/plain.summary" "$work/traced.summary"; then
  echo "framework-suite: $framework $release ends alike with and without otel-handoff"
else
  echo "framework-suite: $framework $release differs under otel-handoff (above)"
  exit 1
fi
