#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` (CPU only, that one target) from the llama.cpp sources vendored
# in the llama-cpp-python source distribution, for `agentserve bench peer`. The sdist comes from
# this machine's package index through pip (`--no-binary :all:` keeps pip from picking a wheel);
# nothing else is downloaded. Output is cached per version and the script is idempotent: a second
# run prints the cached binary's path and builds nothing.
#
#   scripts/build_llama_server.sh      # prints the path of the built llama-server on its last line
#
# Env:
#   LLAMA_CPP_PYTHON_VERSION   default 0.3.36
#   LLAMA_CACHE_ROOT           default ~/.cache/agentserve/llama.cpp
#   JOBS                       parallel compile jobs (default 2); the build runs under `nice -n 10`
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE_ROOT="${LLAMA_CACHE_ROOT:-$HOME/.cache/agentserve/llama.cpp}"
JOBS="${JOBS:-2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

DEST="$CACHE_ROOT/$VERSION"
BIN="$DEST/bin/llama-server"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$DEST"
SDIST="$DEST/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DEST" >&2
fi
SRC="$DEST/src"
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  rm -rf "$SRC"
  mkdir -p "$SRC"
  tar xzf "$SDIST" -C "$SRC" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi

# CPU only: no GPU backends, no curl (the model is a local file), no tests or examples.
# GGML_NATIVE tunes the kernels to this CPU, as a user building llama.cpp here would get.
cmake -S "$SRC" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
  -DBUILD_SHARED_LIBS=OFF >&2
nice -n 10 cmake --build "$DEST/build" --target llama-server -j"$JOBS" >&2

mkdir -p "$DEST/bin"
cp "$DEST/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$BIN"
