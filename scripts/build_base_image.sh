#!/usr/bin/env bash
# Provide the base image every project image builds FROM, without pulling from a registry.
#
# Uses python:3.11-slim-bookworm when it is already local; otherwise builds (once)
# agentserve/base:bookworm with debootstrap from the Debian mirror this machine's apt uses.
# Either way agentserve/base:bookworm ends up existing (the upstream image is tagged with it when
# our tag is absent), so a compose build relying on the Dockerfile's default BASE also works.
# Prints the chosen image name on stdout, so callers can do:
#   BASE_IMAGE="$(scripts/build_base_image.sh)"
#   docker build --build-arg BASE="$BASE_IMAGE" ...
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/steps.sh"
STEP_PREFIX=build_base_image

UPSTREAM_IMAGE="python:3.11-slim-bookworm"
LOCAL_BASE_IMAGE="${AGENTSERVE_BASE_IMAGE_TAG:-agentserve/base:bookworm}"
SUITE="bookworm"

log() { step_log "$@"; }
die() { log "ERROR: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# First Debian archive URI configured for apt (deb822 files first, then the one-line format),
# skipping the security archive, which does not carry the main suite.
debian_mirror() {
    local uri=""
    if compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null; then
        uri="$(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' \
            /etc/apt/sources.list.d/*.sources | grep -v -- '-security' | head -n 1)"
    fi
    if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
        uri="$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' \
            /etc/apt/sources.list | grep -v -- '-security' | head -n 1)"
    fi
    [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list"
    echo "$uri"
}

build_with_debootstrap() {
    if ! command -v debootstrap >/dev/null 2>&1; then
        step "installing debootstrap (apt-get)" quiet_apt debootstrap
    fi
    local mirror rootfs
    mirror="$(debian_mirror)"
    rootfs="$(mktemp -d /tmp/agentserve-rootfs.XXXXXX)"
    # The root filesystem holds root-owned files; remove it as root whatever happens.
    trap 'as_root rm -rf "$rootfs"' EXIT
    log "debootstrap $SUITE from the machine's apt mirror into $rootfs"
    as_root debootstrap --variant=minbase \
        --include=python3,python3-venv,python3-pip,ca-certificates \
        "$SUITE" "$rootfs" "$mirror" >/tmp/agentserve-debootstrap.log 2>&1 \
        || { tail -n 30 /tmp/agentserve-debootstrap.log >&2; die "debootstrap failed"; }
    # Package caches and lists are dead weight in an image that never runs apt.
    as_root rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    log "importing $rootfs as $LOCAL_BASE_IMAGE"
    as_root tar -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        - "$LOCAL_BASE_IMAGE" >/dev/null
    as_root rm -rf "$rootfs"
    trap - EXIT
}

choose_base_image() {
    if image_exists "$UPSTREAM_IMAGE"; then
        log "using local $UPSTREAM_IMAGE"
        image_exists "$LOCAL_BASE_IMAGE" || docker tag "$UPSTREAM_IMAGE" "$LOCAL_BASE_IMAGE"
        BASE_IMAGE="$UPSTREAM_IMAGE"
        return
    fi
    if image_exists "$LOCAL_BASE_IMAGE"; then
        log "using existing $LOCAL_BASE_IMAGE (debootstrap)"
    else
        step "building $LOCAL_BASE_IMAGE with debootstrap (once per machine, a few minutes)" build_with_debootstrap
    fi
    BASE_IMAGE="$LOCAL_BASE_IMAGE"
}

choose_base_image
echo "$BASE_IMAGE"
