#!/usr/bin/env bash
# Installs agentserve and its pinned test/tool dependencies into ./.venv (idempotent: a stamp of
# the lock files' hash skips the pip step when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/steps.sh
STEP_PREFIX=install
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  step "creating the virtualenv .venv ($("$PY" --version 2>&1))" "$PY" -m venv .venv
fi
stamp=.venv/.agentserve-lock.sha256
want=$(cat requirements.lock requirements-dev.lock pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  step_log ".venv is up to date with requirements*.lock and pyproject.toml"
  exit 0
fi
start=$SECONDS
step "upgrading pip" quiet_pip .venv/bin/python install -q --upgrade pip
step "installing the pinned dependencies of requirements-dev.lock (the longest step: minutes on a fresh machine)" \
  quiet_pip .venv/bin/python install -q -r requirements-dev.lock
step "installing agentserve itself (editable)" quiet_pip .venv/bin/python install -q --no-deps -e .
echo "$want" > "$stamp"
step_log "installed in $((SECONDS - start))s"
