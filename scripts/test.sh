#!/usr/bin/env bash
# Runs all test tiers (unit, integration, container). Extra arguments go to pytest,
# e.g. `scripts/test.sh -m unit`.
#
# Works on a fresh machine: the venv is installed here, and the container tier's fixture
# (tests/support/compose.py) runs scripts/build_images.sh, which sets up Docker (setup_docker.sh)
# and builds whatever images are missing or stale. So Docker is touched only when container
# tests are selected, and images already built in this run are not built again.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/steps.sh
once install scripts/install.sh
exec .venv/bin/python -m pytest tests "$@"
