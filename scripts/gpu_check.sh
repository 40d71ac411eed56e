#!/usr/bin/env bash
# The engine on a CUDA GPU (`--device cuda`): names the GPU, runs the engine parity tests with
# their engines on it (AGENTSERVE_TEST_DEVICE=cuda, read by tests/support/device.py: transformers
# parity of logits and greedy tokens, prefix-cache hits, serialized and layerwise KV imports against
# a full recompute, all on the GPU) and `agentserve bench engine --device cuda --json`. On a machine
# without a CUDA GPU (or with a CPU-only torch) it exits 1 with a line saying so; CI never runs it.
#
#   scripts/gpu_check.sh               # from the checkout, with .venv holding a CUDA build of torch
#
# Env:
#   PYTHON     default .venv/bin/python
#   DEVICE     default cuda (cuda:N for another GPU)
#   OUT        where the bench JSON and the logs go (default artifacts/gpu-check-<time>)
#   QUICK=0    the full bench engine instead of --quick
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-artifacts/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"

if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: torch sees no CUDA GPU here ($("$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)')): nothing checked" >&2
  exit 1
fi

echo "== the GPU"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee "$OUT/nvidia-smi.csv"
fi
"$PYTHON" - "$DEVICE" <<'PY' | tee "$OUT/torch.txt"
import sys

import torch

from agentserve.engine.device import device_name, resolve_device

device = resolve_device(sys.argv[1])
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, engine device {device_name(device)}")
PY

echo "== engine parity tests on $DEVICE"
AGENTSERVE_TEST_DEVICE=$DEVICE "$PYTHON" -m pytest -q -p no:cacheprovider \
  tests/unit/engine/test_model_parity.py tests/unit/engine/test_engine_prefix_cache.py \
  tests/unit/engine/test_device.py 2>&1 | tee "$OUT/parity.log"

echo "== agentserve bench engine --device $DEVICE"
quick=(--quick)
[[ ${QUICK:-1} == 0 ]] && quick=()
"$PYTHON" -m agentserve.cli.main bench engine --device "$DEVICE" "${quick[@]}" --json | tee "$OUT/bench_engine.json"
echo "gpu_check: passed on $(cat "$OUT/torch.txt"); results in $OUT"
