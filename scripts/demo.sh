#!/usr/bin/env bash
# Brings the whole system up with docker compose on SmolLM2-135M-Instruct, the images' default model
# (installing Docker, compose v2 and building the images offline when needed; the install step
# fetches the model, the image build copies it in), then runs a demo agent session: three turns with
# a tool call between them, printing each reply, per-turn cache hits and a link to the last turn's
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
# The host ports compose publishes (docker-compose.yml; overridable there, so here too).
grpc="127.0.0.1:${AGENTSERVE_GRPC_HOST_PORT:-50051}"
tools="http://127.0.0.1:${AGENTSERVE_TOOLPROXY_HOST_PORT:-8080}"
export AGENTSERVE_TRACING_UI="http://127.0.0.1:${AGENTSERVE_PHOENIX_HOST_PORT:-6006}"
step "running the demo agent session" .venv/bin/agentserve demo --address "$grpc" --toolproxy "$tools"
step_log "done in $((SECONDS - start))s. Tracing UI: $AGENTSERVE_TRACING_UI (project 'agentserve'); stop with: docker compose down"
