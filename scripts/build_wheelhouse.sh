#!/usr/bin/env bash
# Fill the wheelhouses the images install from offline (containers cannot reach PyPI).
#
#   wheelhouse/          requirements.lock + the project's own wheel  -> images/Dockerfile
#   wheelhouse-phoenix/  requirements-phoenix.lock                    -> images/phoenix.Dockerfile
#
# Wheels are chosen for the image's interpreter, not the host's: CPython 3.11 on glibc 2.36
# (Debian bookworm), x86_64. Each wheelhouse is cached: a stamp file holds the sha256 of its lock
# file, and the download is skipped while it matches; a changed lock starts from an empty folder
# so stale wheels do not linger. The project wheel is rebuilt on every run (a few seconds).
#
# Usage: scripts/build_wheelhouse.sh [--only agentserve|phoenix]
# Env:   PYTHON (default python3), used to run pip on the host.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
STAMP_NAME=".lock.sha256"
source "$ROOT/scripts/lib/steps.sh"
STEP_PREFIX=build_wheelhouse

log() { step_log "$@"; }
die() { log "ERROR: $*"; exit 1; }

# Target tags for the image: cp311 and every manylinux level bookworm's glibc 2.36 can load.
target_flags() {
    local flags=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311)
    local minor
    for minor in $(seq 36 -1 5); do
        flags+=(--platform "manylinux_2_${minor}_x86_64")
    done
    flags+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
    printf '%s\n' "${flags[@]}"
}

# download_locked LOCK DIR: make DIR hold exactly the wheels LOCK resolves to, unless its stamp
# already records LOCK's hash.
download_locked() {
    local lock="$ROOT/$1" dir="$ROOT/$2"
    [ -f "$lock" ] || die "missing $lock"
    local want
    want="$(sha256sum "$lock" | cut -d' ' -f1)"
    if [ -f "$dir/$STAMP_NAME" ] && [ "$(cat "$dir/$STAMP_NAME")" = "$want" ]; then
        log "$2/ up to date with $1"
        return
    fi
    log "downloading wheels for $1 into $2/"
    rm -rf "$dir"
    mkdir -p "$dir"
    local flags
    mapfile -t flags < <(target_flags)
    quiet_pip "$PYTHON" download --quiet --disable-pip-version-check --no-deps \
        "${flags[@]}" -d "$dir" -r "$lock"
    # --no-deps above trusts the lock to be complete; this resolve proves it without a network.
    quiet_pip "$PYTHON" download --quiet --disable-pip-version-check --no-index \
        --find-links "$dir" "${flags[@]}" -d "$dir" -r "$lock" \
        || die "$1 is not complete: a dependency above is not pinned in it"
    echo "$want" >"$dir/$STAMP_NAME"
    log "$2/: $(find "$dir" -name '*.whl' | wc -l) wheels, $(du -sh "$dir" | cut -f1)"
}

build_project_wheel() {
    local dir="$ROOT/wheelhouse" src
    rm -f "$dir"/agentserve-*.whl
    log "building the agentserve wheel"
    # Build from a fresh copy: setuptools' build/ folder keeps deleted modules and would ship them.
    src="$(mktemp -d /tmp/agentserve-src.XXXXXX)"
    tar -C "$ROOT" -c --exclude=__pycache__ --exclude='*.egg-info' pyproject.toml services | tar -C "$src" -x
    quiet_pip "$PYTHON" wheel --quiet --disable-pip-version-check --no-deps "$src" -w "$dir"
    rm -rf "$src"
}

only="${2:-all}"
if [ "${1:-}" = "--only" ]; then
    case "$only" in agentserve | phoenix) ;; *) die "--only takes agentserve or phoenix" ;; esac
elif [ -n "${1:-}" ]; then
    die "usage: $0 [--only agentserve|phoenix]"
else
    only="all"
fi

if [ "$only" != phoenix ]; then
    download_locked requirements.lock wheelhouse
    build_project_wheel
fi
if [ "$only" != agentserve ]; then
    download_locked requirements-phoenix.lock wheelhouse-phoenix
fi
