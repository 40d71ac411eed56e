#!/usr/bin/env bash
# Headless Chromium for the container tier's screenshot of the tracing UI (Debian's package).
# A no-op when chromium is already on PATH. Needs root (apt-get), as CI runs.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
echo "[setup_chromium] installing chromium (apt-get, ~1.5 min)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
