#!/usr/bin/env bash
# The framework version matrix: each release in its own virtual environment, running that
# framework's tests (which skip what a release cannot do: reuse before livekit-agents 1.5.3, ...).
# Usage: .ci/matrix.sh [PIP_SPEC[@PYTHON_MINOR] ...]   e.g. .ci/matrix.sh livekit-agents==1.6.10 ag2==0.9.10@3.12
# A spec without "==" (e.g. `ag2`) installs whatever release is newest when CI runs: lower bounds
# only, so the release after the ones we pinned is tested the day it ships.
# Cells run two at a time (MATRIX_JOBS=N for N); each cell's output is printed whole when it ends,
# then a summary table in cell order; exits non-zero naming every cell that failed.
# MATRIX_BESIDE_SUITE=1 (what .ci/run sets, after the main suite): a cell whose release and Python
# minor the main suite's environment for that framework already ran (.venv-test, or
# .venv-google-adk / .venv-strands) is not run again; "newest" is what `pip index versions` names.
set -uo pipefail
cd "$(dirname "$0")/.."

PY311="${PY311:-python3.11}"
pyenv_python() { # minor version -> newest pyenv interpreter of it, if any
  local root; root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  ls -d "$root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -n 1
}
NEWEST_LIVEKIT="1.8.9"
# a pre-release, pinned: pip takes none unasked, so the unpinned cell below stays on the newest stable
PRERELEASE_LIVEKIT="2.0.0b1"
PY312="$(pyenv_python 3.12)"
if [[ $# -gt 0 ]]; then
  CELLS=()
  for spec in "$@"; do
    if [[ "$spec" == *@* ]]; then CELLS+=("${spec%@*}|$(pyenv_python "${spec##*@}")"); else CELLS+=("$spec|$PY311"); fi
  done
else
  CELLS=(
    "livekit-agents==1.2.18|$PY311" "livekit-agents==1.4.6|$PY311" "livekit-agents==1.5.17|$PY311"
    "livekit-agents==1.6.10|$PY311" "livekit-agents==1.7.1|$PY311" "livekit-agents==$NEWEST_LIVEKIT|$PY311"
    "livekit-agents==$NEWEST_LIVEKIT|$(pyenv_python 3.10)" "livekit-agents==$NEWEST_LIVEKIT|$(pyenv_python 3.13)"
    "livekit-agents|$PY311"
    "livekit-agents==$PRERELEASE_LIVEKIT|$PY311"  # pre-release: LiveKit Agents 2.0 (issue 47)
    "ag2==0.9.10|$PY311" "ag2==0.14.0|$PY311" "autogen==0.14.1|$PY311" "autogen|$PY311"
    "ag2==1.0.0|$PY311" "ag2==1.2.1|$PY311" "ag2|$PY311"
    "pipecat-ai==1.5.0|$PY311" "pipecat-ai==1.14.0|$PY311" "pipecat-ai|$PY311"
    "openai-agents==0.21.0|$PY311" "openai-agents==0.24.0|$PY311" "openai-agents|$PY311"
    "google-adk==1.39.1|$PY311" "google-adk==2.0.0|$PY311" "google-adk|$PY311"
    "langgraph==1.1.5|$PY311" "langgraph==1.1.10|$PY311" "langgraph|$PY311"
    "llama-index-core==0.12.45|$PY311" "llama-index-core==0.13.6|$PY311" "llama-index-core|$PY311"
    "strands-agents==1.17.0|$PY311" "strands-agents==1.20.0|$PY311" "strands-agents==1.40.0|$PY311" "strands-agents|$PY311"
    "agent-framework-orchestrations==1.0.0|$PY311" "agent-framework-orchestrations==1.2.0|$PY311"
    "agent-framework-orchestrations|$PY311"
    # CPython 3.12, what many deployments run: the newest pinned release of every framework
    "livekit-agents==$NEWEST_LIVEKIT|$PY312" "autogen==0.14.1|$PY312" "ag2==1.2.1|$PY312"
    "pipecat-ai==1.14.0|$PY312" "openai-agents==0.24.0|$PY312" "google-adk==2.13.0|$PY312"
    "langgraph==1.2.24|$PY312" "llama-index-core==0.14.25|$PY312" "strands-agents==1.62.0|$PY312"
    "agent-framework-orchestrations==1.4.0|$PY312"
  )
fi

ROOT="${MATRIX_DIR:-.matrix}"
# cells run this many at a time (pip's installs and the tests are single-threaded); each writes
# its own log, printed whole when it ends, and its summary row to a file read in cell order
JOBS="${MATRIX_JOBS:-2}"
mkdir -p "$ROOT"

ran_in_suite() { # dist version(or "newest") pyver -> prints the release when the suite's env ran it
  local dist="$1" version="$2" pyver="$3" suite=.venv-test have
  case "$dist" in google-adk) suite=.venv-google-adk ;; strands-agents) suite=.venv-strands ;; esac
  [[ -x "$suite/bin/python" ]] || return 1
  [[ "$("$suite/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == "$pyver" ]] || return 1
  have="$("$suite/bin/python" -c "import importlib.metadata as m; print(m.version('$dist'))" 2>/dev/null)" || return 1
  if [[ "$version" == "newest" ]]; then
    # the newest release this Python can install, as pip would pick it (no pre-releases)
    version="$("$suite/bin/python" -m pip index versions --disable-pip-version-check "$dist" 2>/dev/null \
      | sed -n '1s/^[^(]*(\(.*\))$/\1/p')"
    [[ -n "$version" ]] || return 1
    [[ "$have" == "$version" ]] && { echo "$have (newest)"; return 0; }
    return 1
  fi
  [[ "$have" == "$version" ]] && { echo "$have"; return 0; }
  return 1
}

# uv (the suite's test extra) installs a cell in seconds where pip takes a minute or more: about
# 34 cells, most of the matrix's time; pip when uv is absent or fails (what it printed is kept)
UV="${MATRIX_UV-$(command -v uv || ls .venv-test/bin/uv 2>/dev/null)}"
install_into() { # venv requirement... -> installed, by uv or else pip
  local env="$1"; shift
  if [[ -n "$UV" ]] && "$UV" pip install --quiet --python "$env/bin/python" "$@"; then return 0; fi
  [[ -z "$UV" ]] || echo "uv could not install this cell; pip does"
  "$env/bin/pip" install --quiet --disable-pip-version-check "$@"
}

run_cell() { # spec python index -> $ROOT/cell-<index>.row (and .failed); output on stdout
  local spec="$1" python="$2" index="$3"
  local dist="${spec%%==*}" version="${spec#*==}" tests extra pyver env start installed out rc line
  [[ "$spec" == *"=="* ]] || version="newest"
  row() { echo "$1" > "$ROOT/cell-$index.row"; [[ -z "${2:-}" ]] || echo "$2" > "$ROOT/cell-$index.failed"; }
  case "$dist" in
    # httpx: 1.2/1.4 import it undeclared; opentelemetry-distro: what sets the SDK up under
    # opentelemetry-instrument (without it we rightly warn that nothing will be exported)
    # the real calls (tests/test_livekit_call.py, and on shaped links test_livekit_legs.py) need
    # livekit-server and Jaeger: the main suite runs them; rotel for the job pool's export
    # (tests/test_livekit_job_setup.py)
    livekit-agents) tests=($(ls tests/test_livekit_*.py | grep -v -e test_livekit_call.py -e test_livekit_legs.py))
      extra=(httpx opentelemetry-distro "rotel==$(sed -n 's/^ROTEL_VERSION="\(.*\)"/\1/p' .ci/install-receivers.sh)") ;;
    ag2|autogen) tests=(tests/test_ag2_*.py); extra=() ;;
    # the real calls (tests/test_pipecat_call.py, test_pipecat_workers_call.py) need Jaeger and a WebRTC
    # caller: the main suite runs them
    # ~500 MB each: pip's cache serves the second; redis: RedisBus; fastapi, uvicorn: the websocket proxy's server end
    pipecat-ai) tests=($(ls tests/test_pipecat_*.py | grep -v -e test_pipecat_call.py -e test_pipecat_workers_call.py)); extra=(redis fastapi uvicorn) ;;
    # openinference replaces the SDK's trace processors: ours must survive it on every release
    openai-agents) tests=(tests/test_openai_agents.py); extra=(openinference-instrumentation-openai-agents) ;;
    # the swarm and the supervisor newest that the release takes; openinference's LangChain tracer beside ours
    langgraph) tests=(tests/test_langgraph.py); extra=(langgraph-swarm langgraph-supervisor openinference-instrumentation-langchain) ;;
    # resolved in one pip call with ADK's opentelemetry pins; rotel for the unmodified-app tests; a2a-sdk
    # for the remote transfer (RemoteA2aAgent): 1.x ADK and 2.0 take 0.3 only; the oldest ADK with the
    # oldest a2a-sdk it works with (0.3.11: 1.39.1 passes send_message a request_metadata that 0.3.4,
    # its declared floor, to 0.3.10 refuse), 2.0 with the newest 0.3, later releases with the newest
    google-adk) tests=(tests/test_google_adk.py tests/test_google_adk_user.py tests/test_google_adk_remote.py)
      extra=(opentelemetry-distro openinference-instrumentation-google-adk "rotel==$(sed -n 's/^ROTEL_VERSION="\(.*\)"/\1/p' .ci/install-receivers.sh)")
      case "$version" in
        1.39.1) extra+=("a2a-sdk[http-server]==0.3.11") ;;
        2.0.0) extra+=("a2a-sdk[http-server]<0.4") ;;
        *) extra+=("a2a-sdk[http-server]") ;;
      esac ;;
    # openinference's LlamaIndex instrumentation beside ours, on every release it takes
    llama-index-core) tests=(tests/test_llama_index.py); extra=(openinference-instrumentation-llama-index) ;;
    # its own environment in the suite: opentelemetry-instrumentation-threading (newest 0.66b1) holds
    # the SDK at 1.45.1, and pip, taking the newest exporter first, gives up instead of backtracking
    strands-agents) tests=(tests/test_strands.py); extra=(pyyaml "opentelemetry-exporter-otlp<=1.45.1") ;;
    # a release pair: each orchestrations release with the oldest agent-framework-core it takes
    agent-framework-orchestrations) tests=(tests/test_agent_framework.py)
      case "$version" in
        1.0.0) extra=("agent-framework-core==1.9.0") ;;
        1.2.0) extra=("agent-framework-core==1.19.0") ;;
        *) extra=(agent-framework-core) ;;
      esac ;;
    *) echo "unknown framework in $spec"; return 2 ;;
  esac
  if [[ -z "$python" ]] || ! command -v "$python" >/dev/null 2>&1; then
    row "| $spec | ? | FAILED: no Python interpreter for this cell |" "$spec (no python)"
    return
  fi
  pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  if [[ -n "${MATRIX_BESIDE_SUITE:-}" ]] && line="$(ran_in_suite "$dist" "$version" "$pyver")"; then
    row "| $dist $line | $pyver | the main suite's run (same release, same Python) |"
    echo "=== $spec on Python $pyver: $dist $line, as the main suite ran it; not run again"
    return
  fi
  env="$ROOT/$dist-$version-py$pyver"
  echo "=== $spec on Python $pyver ($env)"
  start=$SECONDS
  if ! { [[ -x "$env/bin/python" ]] || "$python" -m venv "$env"; } \
     || ! install_into "$env" -e . pytest pytest-asyncio hypothesis "$spec" "${extra[@]}" > "$env.install.log" 2>&1; then
    tail -n 20 "$env.install.log"
    row "| $spec | $pyver | FAILED: install (see $env.install.log) |" "$spec/py$pyver (install)"
    return
  fi
  installed="$("$env/bin/python" -c "import importlib.metadata as m; print(m.version('$dist'))")"
  out="$("$env/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" 2>&1)"
  rc=$?
  line="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$' <<<"$out" | tail -n 1)"
  echo "$line   ($((SECONDS - start)) s)"
  if [[ $rc -ne 0 || ( "$version" != "newest" && "$installed" != "$version" ) ]]; then
    grep -E '^(FAILED|ERROR)' <<<"$out" | head -n 20
    row "| $dist $installed | $pyver | FAILED: $line |" "$spec/py$pyver"
  else
    [[ "$version" == "newest" ]] && installed="$installed (newest)"
    row "| $dist $installed | $pyver | $line |"
  fi
}

rm -f "$ROOT"/cell-*.row "$ROOT"/cell-*.failed "$ROOT"/cell-*.out
index=0
for cell in "${CELLS[@]}"; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  index=$((index + 1))
  ( run_cell "${cell%%|*}" "${cell#*|}" "$index" > "$ROOT/cell-$index.out" 2>&1; cat "$ROOT/cell-$index.out" ) &
done
wait
summary=(); failed=()
for ((i = 1; i <= index; i++)); do
  if [[ -f "$ROOT/cell-$i.row" ]]; then summary+=("$(cat "$ROOT/cell-$i.row")"); else
    summary+=("| ${CELLS[$((i - 1))]%%|*} | ? | FAILED: the cell ended without a result (see $ROOT/cell-$i.out) |")
    failed+=("${CELLS[$((i - 1))]%%|*} (no result)")
  fi
  [[ -f "$ROOT/cell-$i.failed" ]] && failed+=("$(cat "$ROOT/cell-$i.failed")")
done

echo
echo "| framework | Python | tests |"
echo "|---|---|---|"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "matrix FAILED for: ${failed[*]}"
  exit 1
fi
echo "matrix passed: ${#CELLS[@]} cells"
