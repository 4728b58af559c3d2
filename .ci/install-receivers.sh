#!/usr/bin/env bash
# Install the real OTLP receivers the export tests run against, pinned, idempotently:
#   rotel (an OpenTelemetry collector)  -> into the test venv ($1, else the active Python)
#   Arize Phoenix (a trace backend)     -> into its own venv, $PHOENIX_VENV
#   chromium (headless, for the UI test), prometheus (the dashboard's queries), unshare, ip,
#   espeak-ng (the real-call test's caller speaks)                                       -> apt-get
#   playwright (python driver only)      -> into the test venv; it drives /usr/bin/chromium
#   Jaeger v2 and our collector (ocb)    -> built with Go from the module proxy into $GO_RECEIVERS
#                                           (one folder per pinned version), linked into the test venv
#   livekit-server v1.11.0 (the real-call test) -> go install, the same way
#   redis-server (Debian's, for Pipecat's RedisBus) -> apt-get download, unpacked into $REDIS_DIR,
#                                           linked into the test venv (no service installed or started)
# The tests find Phoenix through OTEL_HANDOFF_PHOENIX, which defaults to $PHOENIX_VENV/bin/phoenix.
# Usage: .ci/install-receivers.sh [TEST_VENV_DIR]
set -euo pipefail

ROTEL_VERSION="0.0.1a15"
PHOENIX_VERSION="20.26.1"
PLAYWRIGHT_VERSION="1.65.2"
PHOENIX_VENV="${PHOENIX_VENV:-$HOME/.cache/otel-handoff/phoenix-venv}"
JAEGER_MODULE_VERSION="v1.76.0"  # .ci/go/jaeger/go.mod pins it and its dependencies
JAEGER_VERSION="v2.13.0"         # what that module version is released as
OCB_VERSION="v0.140.0"           # the collector release Jaeger v1.76.0 is built on
GO_RECEIVERS="${GO_RECEIVERS:-$HOME/.cache/otel-handoff/go-receivers}"

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
command -v espeak-ng >/dev/null 2>&1 || apt_packages+=(espeak-ng)  # the real-call test's caller speaks
if [[ ${#apt_packages[@]} -eq 0 ]]; then
  installed+=("chromium, prometheus, unshare, ip, espeak-ng (already there)")
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

# Jaeger v2 and the collector that runs collector-config/otelcol-*.yaml, built with Go. Each goes
# in a folder named by its version and a hash of the files that pin it, so a second run reuses it.
CI_GO="$(cd "$(dirname "$0")" && pwd)/go"
go_build() { # name folder command... -> builds once into folder/name, says how long it took
  local name="$1" folder="$2"; shift 2
  if [[ -x "$folder/$name" ]]; then
    installed+=("$name at $folder (already built)")
    return
  fi
  command -v go >/dev/null 2>&1 || { echo "install-receivers: Go is needed to build $name (https://go.dev/dl)" >&2; exit 1; }
  local started=$SECONDS
  rm -rf "$folder.partial" && mkdir -p "$folder.partial"
  if ! ( cd "$folder.partial" && "$@" ) >"$folder.log" 2>&1; then
    tail -n 40 "$folder.log" >&2
    echo "install-receivers: building $name failed (whole log: $folder.log)" >&2
    exit 1
  fi
  rm -f "$folder.log"
  rm -rf "$folder" && mv "$folder.partial" "$folder"
  # older builds of the same receiver: gone, so the cache holds one of each
  find "$(dirname "$folder")" -maxdepth 1 -name "$name-*" ! -path "$folder" ! -path "$folder.*" -exec rm -rf {} +
  installed+=("$name at $folder (built in $((SECONDS - started)) s, $(du -sh "$folder/$name" | cut -f1))")
}
pin_hash() { cat "$@" | sha256sum | cut -c1-12; }
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
JAEGER_DIR="$GO_RECEIVERS/jaeger-$JAEGER_MODULE_VERSION-$(pin_hash "$CI_GO/jaeger/go.mod" "$CI_GO/jaeger/go.sum")"
go_build jaeger "$JAEGER_DIR" sh -c "cd '$CI_GO/jaeger' && go build -trimpath -ldflags '-X github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_VERSION' -o '$JAEGER_DIR.partial/jaeger' github.com/jaegertracing/jaeger/cmd/jaeger"
OTELCOL_DIR="$GO_RECEIVERS/otelcol-handoff-$OCB_VERSION-$(pin_hash "$CI_GO/otelcol-builder.yaml")"
go_build otelcol-handoff "$OTELCOL_DIR" sh -c "GOFLAGS= GOBIN='$GO_RECEIVERS/bin' go install 'go.opentelemetry.io/collector/cmd/builder@$OCB_VERSION' \
  && GOFLAGS= '$GO_RECEIVERS/bin/builder' --config '$CI_GO/otelcol-builder.yaml' \
  && mv build/otelcol-handoff . && rm -rf build"
VENV_BIN="$(dirname "$PY")"
ln -sf "$JAEGER_DIR/jaeger" "$VENV_BIN/jaeger"
ln -sf "$OTELCOL_DIR/otelcol-handoff" "$VENV_BIN/otelcol-handoff"

# livekit-server, for the real-call test (tests/test_livekit_call.py): v1.11.0, the last release whose
# dependencies the Go module proxy serves (v1.12+ need forks it does not). `go install pkg@version`
# builds it from that release's own go.mod and go.sum; named by version, reused on a second run.
LIVEKIT_SERVER_VERSION="v1.11.0"
LIVEKIT_DIR="$GO_RECEIVERS/livekit-server-$LIVEKIT_SERVER_VERSION"
go_build livekit-server "$LIVEKIT_DIR" sh -c "GOFLAGS= GOBIN='$LIVEKIT_DIR.partial' go install 'github.com/livekit/livekit-server/cmd/server@$LIVEKIT_SERVER_VERSION' \
  && mv '$LIVEKIT_DIR.partial/server' '$LIVEKIT_DIR.partial/livekit-server'"
ln -sf "$LIVEKIT_DIR/livekit-server" "$VENV_BIN/livekit-server"

# redis-server, for Pipecat's RedisBus across processes (tests/test_pipecat_workers.py): Debian's
# package and the two libraries it needs, unpacked (apt-get download, dpkg -x) rather than installed,
# so no service is set up or started; the test starts its own on a port it binds. Debian ships the
# server as redis-check-rdb, which runs as the server when called redis-server.
REDIS_DIR="${REDIS_DIR:-$HOME/.cache/otel-handoff/redis}"
if [[ -x "$REDIS_DIR/redis-server" ]]; then
  installed+=("redis-server at $REDIS_DIR (already there)")
else
  rm -rf "$REDIS_DIR.partial" && mkdir -p "$REDIS_DIR.partial/debs"
  ( cd "$REDIS_DIR.partial/debs" && apt-get download -qq redis-tools liblzf1 libjemalloc2 2>/dev/null \
      || { apt-get update -qq && apt-get download -qq redis-tools liblzf1 libjemalloc2; } )
  for deb in "$REDIS_DIR.partial"/debs/*.deb; do dpkg -x "$deb" "$REDIS_DIR.partial/root"; done
  rm -rf "$REDIS_DIR.partial/debs"
  cat >"$REDIS_DIR.partial/redis-server" <<WRAPPER
#!/usr/bin/env bash
LD_LIBRARY_PATH="$REDIS_DIR/root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec -a redis-server "$REDIS_DIR/root/usr/bin/redis-check-rdb" "\$@"
WRAPPER
  chmod +x "$REDIS_DIR.partial/redis-server"
  rm -rf "$REDIS_DIR" && mv "$REDIS_DIR.partial" "$REDIS_DIR"
  installed+=("redis-server at $REDIS_DIR")
fi
ln -sf "$REDIS_DIR/redis-server" "$(dirname "$PY")/redis-server"

echo "install-receivers:"
printf '  %s\n' "${installed[@]}"
echo "  chromium: $(chromium --version 2>/dev/null || echo '?')"
echo "  prometheus: $(prometheus --version 2>&1 | head -n 1 || echo '?')"
echo "  jaeger: $("$VENV_BIN/jaeger" version 2>/dev/null | tail -n 1 | cut -c1-80) ($JAEGER_MODULE_VERSION)"
echo "  otelcol-handoff: $("$VENV_BIN/otelcol-handoff" --version 2>/dev/null || echo '?')"
echo "  redis-server: $("$VENV_BIN/redis-server" --version 2>/dev/null | cut -c1-60 || echo '?')"
echo "  OTEL_HANDOFF_PHOENIX=${OTEL_HANDOFF_PHOENIX:-$PHOENIX_VENV/bin/phoenix}"
# bash's SECONDS: since the script started, every step above included
echo "  total: $SECONDS s ($((SECONDS / 60)) min $((SECONDS % 60)) s)"
