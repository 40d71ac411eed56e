#!/usr/bin/env bash
# Regenerates the Python gRPC code for protos/agentserve/v1/*.proto into the package as
# `agentserve.v1` (the proto package path doubles as the Python import path, so generated
# imports resolve without rewriting). `--check` fails when the committed code has drifted.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
out=services
if [ "${1:-}" = "--check" ]; then
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fi
"$PY" -m grpc_tools.protoc -I protos --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  protos/agentserve/v1/*.proto
touch "$out/agentserve/v1/__init__.py"
if [ "${1:-}" = "--check" ]; then
  if ! diff -r -x __pycache__ "$out/agentserve/v1" services/agentserve/v1; then
    echo "generated protobuf code is stale: run scripts/gen_protos.sh" >&2
    exit 1
  fi
  echo "protobuf code matches protos/"
fi
