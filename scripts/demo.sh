#!/usr/bin/env bash
# Builds the embedded default model (first run only) and generates with it, greedy, printing the
# JSON result (text, token ids, prompt and cached token counts).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
.venv/bin/agentserve generate --prompt "${1:-An agent calls a tool, waits, then reads the result.}" --max-tokens 32 --json
