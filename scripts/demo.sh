#!/usr/bin/env bash
# Brings the whole system up with docker compose on the embedded default model (installing Docker,
# compose v2 and building the images offline when needed), then runs a demo agent session: three
# turns with a tool call between them, printing per-turn cache hits and trace ids, and where the
# tracing UI is. `docker compose down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
export PYTHON="$PWD/.venv/bin/python"
scripts/setup_docker.sh
scripts/build_images.sh
docker compose up -d --wait
.venv/bin/agentserve demo --address 127.0.0.1:50051 --toolproxy http://127.0.0.1:8080
echo "tracing UI: http://127.0.0.1:6006 (project 'agentserve'); stop with: docker compose down"
