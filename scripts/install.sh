#!/usr/bin/env bash
# Installs agentserve and its pinned test/tool dependencies into ./.venv (idempotent: a stamp of
# the lock files' hash skips the pip step when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.agentserve-lock.sha256
want=$(cat requirements.lock requirements-dev.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -r requirements-dev.lock
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
