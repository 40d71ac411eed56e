#!/usr/bin/env bash
# Runs all test tiers (unit, integration, container). Extra arguments go to pytest,
# e.g. `scripts/test.sh -m unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
exec .venv/bin/python -m pytest tests "$@"
