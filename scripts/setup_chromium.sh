#!/usr/bin/env bash
# Headless Chromium for the container tier's screenshot of the tracing UI (Debian's package).
# A no-op when chromium is already on PATH. Needs root (apt-get), as CI runs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/steps.sh"
STEP_PREFIX=setup_chromium
if command -v chromium >/dev/null 2>&1; then
    step_log "chromium already installed: $(chromium --version 2>/dev/null || command -v chromium)"
    exit 0
fi
step "installing Debian's chromium (apt-get, ~1.5 min)" quiet_apt chromium
command -v chromium >/dev/null
