#!/usr/bin/env bash
# Fill debhouse/: the Debian packages images/Dockerfile installs offline (etcd-server and haproxy,
# for several schedulers over shared state behind one entry point), with whatever of their
# dependencies the base image lacks.
#
# The .debs are resolved inside the base image itself, so the dependencies are those its own
# package database is missing, from the Debian mirror its apt is configured with (the one
# scripts/build_base_image.sh took, or python:3.11-slim-bookworm's). The image build then installs
# them from the build context with no network, as it installs the wheelhouse. Cached: a stamp holds
# the hash of the package list and the base image id, and the download is skipped while it matches.
#
# Usage: scripts/build_debhouse.sh BASE_IMAGE
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/steps.sh"
STEP_PREFIX=build_debhouse
PACKAGES=(etcd-server haproxy)
DIR="$ROOT/debhouse"
STAMP_NAME=".packages.sha256"

log() { step_log "$@"; }
die() { log "ERROR: $*"; exit 1; }

[ $# -eq 1 ] || die "usage: $0 BASE_IMAGE"
base="$1"
want="$( (echo "${PACKAGES[*]}"; docker image inspect --format '{{.Id}}' "$base") | sha256sum | cut -d' ' -f1)"
if [ -f "$DIR/$STAMP_NAME" ] && [ "$(cat "$DIR/$STAMP_NAME")" = "$want" ]; then
    log "debhouse/ up to date (${PACKAGES[*]})"
    exit 0
fi
log "resolving ${PACKAGES[*]} against $base into debhouse/"
rm -rf "$DIR"
mkdir -p "$DIR"
apt_log="$(mktemp /tmp/agentserve-debhouse.XXXXXX.log)"
# The container runs as root and writes root-owned files: handed back to this user at the end.
docker run --rm -v "$DIR:/debhouse" "$base" bash -c "
    set -e
    apt-get update -qq
    mkdir -p /debhouse/partial
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --download-only \
        -o Dir::Cache::archives=/debhouse ${PACKAGES[*]}
    rm -rf /debhouse/partial /debhouse/lock
    chown -R $(id -u):$(id -g) /debhouse
" >"$apt_log" 2>&1 || { tail -n 30 "$apt_log" >&2; die "apt-get in $base failed (log: $apt_log)"; }
rm -f "$apt_log"
compgen -G "$DIR/*.deb" >/dev/null || die "apt-get resolved no packages"
echo "$want" >"$DIR/$STAMP_NAME"
log "debhouse/: $(find "$DIR" -name '*.deb' | wc -l) packages, $(du -sh "$DIR" | cut -f1)"
