#!/usr/bin/env bash
# Build the project's images offline, from scratch on a bare machine or incrementally.
#
#   agentserve:dev          images/Dockerfile          every agentserve service
#   agentserve-phoenix:dev  images/phoenix.Dockerfile  tracing UI (Arize Phoenix)
#
# Runs setup_docker.sh, build_base_image.sh, build_wheelhouse.sh and build_debhouse.sh first. An
# image is rebuilt only when the content hash in its label (Dockerfile, lock, wheelhouse stamp, base
# image id and, for agentserve, the source tree, the hardware profiles, the Debian packages of
# debhouse/ and the SmolLM2 GGUF file) differs from what is on disk now. The agentserve image
# carries SmolLM2-135M-Instruct's GGUF file, taken from the
# models cache scripts/install.sh fills (never fetched here).
#
# Usage: scripts/build_images.sh [agentserve] [phoenix]      (default: both)
# Env:
#   AGENTSERVE_IMAGE   tag of the service image (default agentserve:dev)
#   PHOENIX_IMAGE      tag of the tracing image (default agentserve-phoenix:dev)
#   FORCE_REBUILD=1    build even when the label matches
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRIPTS="$ROOT/scripts"
source "$SCRIPTS/lib/steps.sh"
STEP_PREFIX=build_images
AGENTSERVE_IMAGE="${AGENTSERVE_IMAGE:-agentserve:dev}"
PHOENIX_IMAGE="${PHOENIX_IMAGE:-agentserve-phoenix:dev}"
HASH_LABEL="org.agentserve.content-hash"
SMOLLM2="${AGENTSERVE_HOME:-$HOME/.cache/agentserve}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP_NAME=".lock.sha256"

log() { step_log "$@"; }
die() { log "ERROR: $*"; exit 1; }

# Hash of the files that go into the project wheel and of the hardware profiles the image carries:
# paths and contents, build leftovers excluded.
source_tree_hash() {
    (
        cd "$ROOT"
        find pyproject.toml services profiles -type f \
            -not -path '*/__pycache__/*' -not -path '*.egg-info/*' -not -name '*.pyc' -print0 \
            | LC_ALL=C sort -z | xargs -0 sha256sum
    ) | sha256sum | cut -d' ' -f1
}

# content_hash PART...: one hash over file contents and literal strings ("file:PATH" or "str:S").
content_hash() {
    local part
    for part in "$@"; do
        case "$part" in
            file:*) sha256sum "${part#file:}" ;;
            str:*) echo "${part#str:}" ;;
        esac
    done | sha256sum | cut -d' ' -f1
}

image_label() {
    docker image inspect --format "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$1" 2>/dev/null || true
}

# build_image TAG HASH DOCKERFILE CONTEXT: docker build unless TAG already carries HASH.
build_image() {
    local tag="$1" hash="$2" dockerfile="$3" context="$4"
    if [ "${FORCE_REBUILD:-0}" != 1 ] && [ "$(image_label "$tag")" = "$hash" ]; then
        log "$tag is up to date (${hash:0:12})"
        return
    fi
    local old_id build_log
    old_id="$(docker image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)"
    build_log="$(mktemp /tmp/agentserve-docker-build.XXXXXX.log)"
    cp "$dockerfile" "$context/Dockerfile"
    log "building $tag with docker build (log: $build_log)"
    # The legacy builder is what this engine offers without buildx; it handles multi-stage fine.
    DOCKER_BUILDKIT=0 docker build --build-arg "BASE=$BASE_IMAGE" --label "$HASH_LABEL=$hash" \
        -t "$tag" "$context" >"$build_log" 2>&1 \
        || { tail -n 40 "$build_log" >&2; die "docker build of $tag failed"; }
    # The replaced image would otherwise linger untagged, ~1 GB each time.
    if [ -n "$old_id" ] && [ "$old_id" != "$(docker image inspect --format '{{.Id}}' "$tag")" ]; then
        docker image rm "$old_id" >/dev/null 2>&1 || true
    fi
    log "$tag: $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1 / 1e6}')"
}

# stage_into DIR PATH...: a minimal build context; hard links, so staging costs nothing.
stage_into() {
    local dir="$1" src
    shift
    for src in "$@"; do
        cp -al "$src" "$dir/" 2>/dev/null || cp -a "$src" "$dir/"
    done
}

build_agentserve() {
    local hash context
    [ -f "$SMOLLM2" ] || die "$SMOLLM2 is missing: scripts/install.sh fetches it"
    hash="$(content_hash "file:$ROOT/images/Dockerfile" "file:$ROOT/requirements.lock" \
        "file:$ROOT/wheelhouse/$STAMP_NAME" "file:$ROOT/debhouse/.packages.sha256" "str:$(source_tree_hash)" \
        "str:$BASE_ID" "file:$SMOLLM2")"
    context="$WORK/agentserve"
    mkdir -p "$context/wheelhouse" "$context/dist" "$context/models"
    stage_into "$context" "$ROOT/requirements.lock" "$ROOT/profiles" "$ROOT/debhouse"
    stage_into "$context/models" "$SMOLLM2"
    find "$ROOT/wheelhouse" -maxdepth 1 -name '*.whl' -not -name 'agentserve-*' \
        -exec cp -al {} "$context/wheelhouse/" \;
    cp "$ROOT"/wheelhouse/agentserve-*.whl "$context/dist/"
    build_image "$AGENTSERVE_IMAGE" "$hash" "$ROOT/images/Dockerfile" "$context"
}

build_phoenix() {
    local hash context
    hash="$(content_hash "file:$ROOT/images/phoenix.Dockerfile" "file:$ROOT/requirements-phoenix.lock" \
        "file:$ROOT/wheelhouse-phoenix/$STAMP_NAME" "str:$BASE_ID")"
    context="$WORK/phoenix"
    mkdir -p "$context"
    stage_into "$context" "$ROOT/requirements-phoenix.lock" "$ROOT/wheelhouse-phoenix"
    build_image "$PHOENIX_IMAGE" "$hash" "$ROOT/images/phoenix.Dockerfile" "$context"
}

want_agentserve=0
want_phoenix=0
[ $# -gt 0 ] || set -- agentserve phoenix
for target in "$@"; do
    case "$target" in
        agentserve) want_agentserve=1 ;;
        phoenix) want_phoenix=1 ;;
        *) die "unknown image '$target' (agentserve, phoenix)" ;;
    esac
done

once setup_docker step "setting up Docker (engine, compose v2 plugin)" "$SCRIPTS/setup_docker.sh"
# Its stdout is the image name; its progress goes to stderr.
BASE_IMAGE="$(step "providing the base image (no registry pulls)" "$SCRIPTS/build_base_image.sh")"
log "base image: $BASE_IMAGE"
BASE_ID="$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")"

if [ "$want_agentserve" = 1 ] && [ "$want_phoenix" = 1 ]; then
    wheels=()
elif [ "$want_agentserve" = 1 ]; then
    wheels=(--only agentserve)
else
    wheels=(--only phoenix)
fi
step "filling the offline wheelhouses" "$SCRIPTS/build_wheelhouse.sh" "${wheels[@]}"
if [ "$want_agentserve" = 1 ]; then
    step "fetching the image's Debian packages (etcd-server, haproxy)" "$SCRIPTS/build_debhouse.sh" "$BASE_IMAGE"
fi

WORK="$(mktemp -d /tmp/agentserve-images.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
if [ "$want_agentserve" = 1 ]; then step "image $AGENTSERVE_IMAGE (every agentserve service)" build_agentserve; fi
if [ "$want_phoenix" = 1 ]; then step "image $PHOENIX_IMAGE (tracing UI)" build_phoenix; fi
