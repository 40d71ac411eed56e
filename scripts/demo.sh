#!/usr/bin/env bash
# Brings the whole system up with docker compose on the embedded default model (installing Docker,
# compose v2 and building the images offline when needed), then runs a demo agent session: three
# turns with a tool call between them, printing per-turn cache hits and a link to the last turn's
# trace in the tracing UI. `docker compose down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/steps.sh
STEP_PREFIX=demo
start=$SECONDS
once install scripts/install.sh
export PYTHON="$PWD/.venv/bin/python"
# build_images.sh sets up Docker first (setup_docker.sh), once.
once build_images scripts/build_images.sh
step "starting the deployment (docker compose up --wait: every service healthy)" docker compose up -d --wait
step "running the demo agent session" .venv/bin/agentserve demo --address 127.0.0.1:50051 --toolproxy http://127.0.0.1:8080
step_log "ready in $((SECONDS - start))s. Tracing UI: http://127.0.0.1:6006 (project 'agentserve'); stop with: docker compose down"
