#!/usr/bin/env bash
# Install the real OTLP receivers the export tests run against, pinned, idempotently:
#   rotel (an OpenTelemetry collector)  -> into the test venv ($1, else the active Python)
#   Arize Phoenix (a trace backend)     -> into its own venv, $PHOENIX_VENV
#   chromium (headless, for the UI test), prometheus (the dashboard's queries), unshare, ip -> apt-get
#   playwright (python driver only)      -> into the test venv; it drives /usr/bin/chromium
# The tests find Phoenix through OTEL_HANDOFF_PHOENIX, which defaults to $PHOENIX_VENV/bin/phoenix.
# Usage: .ci/install-receivers.sh [TEST_VENV_DIR]
set -euo pipefail

ROTEL_VERSION="0.0.1a15"
PHOENIX_VERSION="20.26.1"
PLAYWRIGHT_VERSION="1.65.2"
PHOENIX_VENV="${PHOENIX_VENV:-$HOME/.cache/otel-handoff/phoenix-venv}"

if [[ $# -ge 1 && -n "$1" ]]; then
  PY="$1/bin/python"
elif [[ -n "${VIRTUAL_ENV:-}" ]]; then
  PY="$VIRTUAL_ENV/bin/python"
else
  PY="$(command -v python3)"
fi
[[ -x "$PY" ]] || { echo "install-receivers: no Python at $PY" >&2; exit 1; }

installed=()
pip_quiet() { "$1" -m pip install --quiet --disable-pip-version-check "${@:2}"; }
has_version() { # python distribution version -> true when that exact version is installed
  [[ "$("$1" -c "import importlib.metadata as m; print(m.version('$2'))" 2>/dev/null)" == "$3" ]]
}

# rotel, into the test venv
if has_version "$PY" rotel "$ROTEL_VERSION"; then
  installed+=("rotel $ROTEL_VERSION (already there)")
else
  pip_quiet "$PY" "rotel==$ROTEL_VERSION"
  installed+=("rotel $ROTEL_VERSION")
fi

# Phoenix, in its own venv (about 850 MB of dependencies we keep away from the test venv)
if [[ -x "$PHOENIX_VENV/bin/python" ]] && has_version "$PHOENIX_VENV/bin/python" arize-phoenix "$PHOENIX_VERSION"; then
  installed+=("arize-phoenix $PHOENIX_VERSION at $PHOENIX_VENV (already there)")
else
  mkdir -p "$(dirname "$PHOENIX_VENV")"
  [[ -x "$PHOENIX_VENV/bin/python" ]] || "$PY" -m venv "$PHOENIX_VENV"
  pip_quiet "$PHOENIX_VENV/bin/python" "arize-phoenix==$PHOENIX_VERSION"
  installed+=("arize-phoenix $PHOENIX_VERSION at $PHOENIX_VENV")
fi

# chromium (playwright's own browser download does not work here), and unshare + ip, which keep
# Phoenix's gRPC port (it binds [::]) inside a network namespace of its own: from the distribution
apt_packages=()
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)
command -v prometheus >/dev/null 2>&1 || apt_packages+=(prometheus)  # the dashboard's queries, run for real
command -v unshare >/dev/null 2>&1 || apt_packages+=(util-linux)
command -v ip >/dev/null 2>&1 || apt_packages+=(iproute2)
if [[ ${#apt_packages[@]} -eq 0 ]]; then
  installed+=("chromium, prometheus, unshare, ip (already there)")
else
  SUDO=""
  [[ "$(id -u)" == 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_packages[@]}" >/dev/null
  installed+=("${apt_packages[@]}")
fi

# playwright's python driver only, into the test venv
if has_version "$PY" playwright "$PLAYWRIGHT_VERSION"; then
  installed+=("playwright $PLAYWRIGHT_VERSION (already there)")
else
  pip_quiet "$PY" "playwright==$PLAYWRIGHT_VERSION"
  installed+=("playwright $PLAYWRIGHT_VERSION")
fi

echo "install-receivers:"
printf '  %s\n' "${installed[@]}"
echo "  chromium: $(chromium --version 2>/dev/null || echo '?')"
echo "  prometheus: $(prometheus --version 2>&1 | head -n 1 || echo '?')"
echo "  OTEL_HANDOFF_PHOENIX=${OTEL_HANDOFF_PHOENIX:-$PHOENIX_VENV/bin/phoenix}"
