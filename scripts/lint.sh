#!/usr/bin/env bash
# Static checks, as CI runs them: ruff lint, ruff format, mypy, import-linter's architecture
# contracts (configs in pyproject.toml), and no dated measurement in a comment or docstring
# (scripts/check_comments.py). Every check runs even when an earlier one fails, so one run
# shows everything; exits non-zero if any failed.
#
# Usage: scripts/lint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/steps.sh
once install scripts/install.sh
BIN=.venv/bin
FAILED=()

check() {
    local name="$1"
    shift
    echo "==== lint $name: $* ===="
    if "$@"; then
        echo "---- $name: ok"
    else
        echo "---- $name: FAILED (exit $?)"
        FAILED+=("$name")
    fi
}

check ruff-check "$BIN/ruff" check services tests scripts
check ruff-format "$BIN/ruff" format --check services tests scripts
check mypy "$BIN/mypy"
check import-contracts "$BIN/lint-imports"
check dated-comments "$BIN/python" scripts/check_comments.py services tests scripts

if [ ${#FAILED[@]} -gt 0 ]; then
    echo "lint: failed: ${FAILED[*]}"
    exit 1
fi
echo "lint: all checks passed"
