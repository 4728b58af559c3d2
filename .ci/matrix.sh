#!/usr/bin/env bash
# The livekit-agents version matrix: each release in its own virtual environment, running the
# LiveKit test suite (tests skip what a release cannot do: reuse before 1.5.3, ...).
# Usage: .ci/matrix.sh [VERSION ...]     (default: the table below)
# Prints one line per cell and a summary table; exits non-zero naming every cell that failed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY311="${PY311:-python3.11}"
pyenv_python() { # minor version -> interpreter path from pyenv, if present
  local root; root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  ls -d "$root"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V | tail -n 1
}
NEWEST="1.8.9"
if [[ $# -gt 0 ]]; then
  CELLS=(); for v in "$@"; do CELLS+=("$v:$PY311"); done
else
  CELLS=("1.2.18:$PY311" "1.4.6:$PY311" "1.5.17:$PY311" "1.6.10:$PY311" "1.7.1:$PY311"
         "$NEWEST:$PY311" "$NEWEST:$(pyenv_python 3.10)" "$NEWEST:$(pyenv_python 3.13)")
fi

ROOT="${MATRIX_DIR:-.matrix}"
mkdir -p "$ROOT"
summary=(); failed=()
for cell in "${CELLS[@]}"; do
  version="${cell%%:*}"; python="${cell#*:}"
  if [[ -z "$python" ]] || ! command -v "$python" >/dev/null 2>&1; then
    summary+=("| $version | (missing interpreter) | FAILED: no Python for this cell |"); failed+=("$version (no python)")
    continue
  fi
  pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  env="$ROOT/lk-$version-py$pyver"
  echo "=== livekit-agents $version on Python $pyver ($env)"
  start=$SECONDS
  if ! { [[ -x "$env/bin/python" ]] || "$python" -m venv "$env"; } \
     || ! "$env/bin/pip" install --quiet --disable-pip-version-check -e '.[test]' "livekit-agents==$version" httpx \
          > "$env.install.log" 2>&1; then
    tail -n 20 "$env.install.log"
    summary+=("| $version | $pyver | FAILED: install (see $env.install.log) |"); failed+=("$version/py$pyver (install)")
    continue
  fi
  installed="$("$env/bin/python" -c 'import livekit.agents as a; print(a.__version__)')"
  out="$("$env/bin/python" -m pytest -q -p no:cacheprovider tests/test_livekit_handoffs.py \
        tests/test_livekit_instrumentor.py tests/test_livekit_metrics.py 2>&1)"
  rc=$?
  line="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed).* =+$' <<<"$out" | tail -n 1)"
  echo "$line   ($((SECONDS - start)) s)"
  if [[ $rc -ne 0 || "$installed" != "$version" ]]; then
    grep -E '^(FAILED|ERROR)' <<<"$out" | head -n 20
    summary+=("| $installed | $pyver | FAILED: $line |"); failed+=("$version/py$pyver")
  else
    summary+=("| $installed | $pyver | $line |")
  fi
done

echo
echo "| livekit-agents | Python | LiveKit tests |"
echo "|---|---|---|"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "matrix FAILED for: ${failed[*]}"
  exit 1
fi
echo "matrix passed: ${#CELLS[@]} cells"
