#!/usr/bin/env bash
# An external client validates agentserve's OpenAI-compatible API: aiperf (NVIDIA's benchmark
# client) replays the first 100 requests of the Mooncake synthetic trace, on its recorded
# schedule, against the docker compose deployment, and must finish with zero errors and every
# output exactly as long as the trace asks (aiperf's "OSL mismatch" check): requests carry vLLM's
# `ignore_eos`, and aiperf counts output tokens from the server's usage (re-tokenizing the text of
# a random-weights model would not give back the generated count). aiperf's server-metrics and GPU
# collectors are off: there is no GPU, the service metrics are not at the OpenAI URL, and on a busy
# machine an idle collector that misses heartbeats makes aiperf exit with an error.
#
#   scripts/aiperf_check.sh            # sets up Docker + images, starts a fresh compose project on
#                                      # free loopback ports, runs aiperf, tears the project down
#
# What it does to the trace: Mooncake prompts reach 66k tokens, beyond the embedded model's 32k
# context and far beyond what 2 CPU cores prefill in a few minutes. Like `agentserve bench replay
# --token-scale`, it divides every length by SCALE (default 16) and keeps the hash ids, with
# aiperf's hash block size shrunk from 512 to 512/SCALE tokens (`--isl-block-size`): prompts that
# share hash ids still share their prefix, so the trace's prefix reuse is kept. The scaled subset
# is written next to aiperf's artifacts (mooncake_first100_scaled.jsonl); records keep no session
# ids (aiperf would prepend history to lengths that are already cumulative).
#
# Env:
#   AIPERF_VENV      aiperf's own venv (default artifacts/aiperf-venv; ~1.2 GB, created once)
#   AIPERF_VERSION   default 0.13.0
#   OUT              artifact dir (default artifacts/aiperf-<time>)
#   REQUESTS         requests taken from the head of the trace (default 100)
#   SCALE            length divisor, must divide 512 (default 16)
#   SPEEDUP          aiperf --synthesis-speedup-ratio for the recorded timestamps (default 1)
#   TRACE            default traces/mooncake/synthetic_trace.jsonl (the checkout's copy)
#   KEEP_STACK=1     leave the compose project running (its name and ports are printed)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
AIPERF_VENV="${AIPERF_VENV:-$ROOT/artifacts/aiperf-venv}"
AIPERF_VERSION="${AIPERF_VERSION:-0.13.0}"
OUT="${OUT:-$ROOT/artifacts/aiperf-$(date +%Y%m%d-%H%M%S)}"
REQUESTS="${REQUESTS:-100}"
SCALE="${SCALE:-16}"
SPEEDUP="${SPEEDUP:-1}"
TRACE="${TRACE:-$ROOT/traces/mooncake/synthetic_trace.jsonl}"
PY="$ROOT/.venv/bin/python"

log() { echo "[aiperf_check] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ -f "$TRACE" ] || die "trace not found: $TRACE"
[ $((512 % SCALE)) -eq 0 ] || die "SCALE must divide 512, got $SCALE"
mkdir -p "$OUT"

# 1. agentserve's venv (for the tokenizer) and aiperf's own venv.
scripts/install.sh
if ! "$AIPERF_VENV/bin/aiperf" --version >/dev/null 2>&1; then
    log "installing aiperf $AIPERF_VERSION into $AIPERF_VENV (once, ~1.2 GB)"
    python3 -m venv "$AIPERF_VENV"
    "$AIPERF_VENV/bin/python" -m pip install -q "aiperf==$AIPERF_VERSION"
fi

# 2. The default model's tokenizer, in the Hugging Face cache layout aiperf's workers need, and
#    proof that `transformers` loads it.
MODEL_DIR="$("$PY" -c 'from agentserve.engine.default_model import ensure_default_model; print(ensure_default_model())')"
HF_CACHE="$OUT/hfcache"
SNAPSHOT=0000000000000000000000000000000000000001
REPO="$HF_CACHE/models--local--agentserve-tiny"
mkdir -p "$REPO/snapshots/$SNAPSHOT" "$REPO/refs"
cp "$MODEL_DIR"/tokenizer*.json "$MODEL_DIR"/special_tokens_map.json "$MODEL_DIR"/config.json "$REPO/snapshots/$SNAPSHOT/"
echo -n "$SNAPSHOT" > "$REPO/refs/main"
export HF_HUB_CACHE="$HF_CACHE" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$AIPERF_VENV/bin/python" - <<'EOF'
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained("local/agentserve-tiny")
ids = tok("def cache(): return 42")["input_ids"]
assert tok.decode(ids, skip_special_tokens=True).strip() == "def cache(): return 42", ids
print(f"[aiperf_check] transformers loads the tokenizer: {type(tok).__name__}, vocab {len(tok)}")
EOF

# 3. The first REQUESTS records, every length divided by SCALE, hash ids cut to the scaled length.
SUBSET="$OUT/mooncake_first${REQUESTS}_scaled.jsonl"
"$PY" - "$TRACE" "$SUBSET" "$REQUESTS" "$SCALE" <<'EOF'
import json, math, sys

src, dst, n, scale = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
block = 512 // scale
with open(src) as f, open(dst, "w") as out:
    for i, line in zip(range(n), f):
        r = json.loads(line)
        length = max(1, math.ceil(r["input_length"] / scale))
        r.update(input_length=length, output_length=max(1, round(r["output_length"] / scale)),
                 hash_ids=r["hash_ids"][:math.ceil(length / block)])
        out.write(json.dumps(r) + "\n")
EOF
log "wrote $SUBSET ($(wc -l < "$SUBSET") requests, lengths / $SCALE, hash blocks of $((512 / SCALE)) tokens)"

# 4. A fresh compose project on free loopback ports.
scripts/build_images.sh
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PROJECT="agentserve-aiperf-$$"
ENV_FILE="$OUT/compose.env"
HTTP_PORT=$(free_port)
cat > "$ENV_FILE" <<EOF
AGENTSERVE_GRPC_HOST_PORT=$(free_port)
AGENTSERVE_HTTP_HOST_PORT=$HTTP_PORT
AGENTSERVE_TOOLPROXY_HOST_PORT=$(free_port)
AGENTSERVE_PHOENIX_HOST_PORT=$(free_port)
EOF
# The tiny model (docker-compose.tiny.yml): the tokenizer above is its own, and its speed keeps the run to minutes.
compose() {
    docker compose -p "$PROJECT" -f "$ROOT/docker-compose.yml" -f "$ROOT/docker-compose.tiny.yml" \
        --env-file "$ENV_FILE" "$@"
}
cleanup() {
    compose logs --no-color --timestamps > "$OUT/compose.log" 2>&1 || true
    if [ "${KEEP_STACK:-0}" = 1 ]; then
        log "leaving $PROJECT running (docker compose -p $PROJECT down -v to remove)"
    else
        compose down -v --remove-orphans >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
log "starting compose project $PROJECT (OpenAI API on 127.0.0.1:$HTTP_PORT)"
compose up -d --wait --wait-timeout 900
# /health is 200 once a prefill and a decode engine have registered with the scheduler.
for _ in $(seq 120); do
    curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null && break
    sleep 1
done
curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null || die "scheduler not ready: $(curl -s "http://127.0.0.1:$HTTP_PORT/health")"
MODEL="$(curl -sf "http://127.0.0.1:$HTTP_PORT/v1/models" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"

# 5. aiperf on the recorded schedule.
CMD=("$AIPERF_VENV/bin/aiperf" profile --model "$MODEL" --url "http://127.0.0.1:$HTTP_PORT"
     --endpoint-type chat --streaming --tokenizer local/agentserve-tiny
     --extra-inputs '{"ignore_eos": true}' --use-server-token-count
     --no-server-metrics --no-gpu-telemetry
     --input-file "$SUBSET" --custom-dataset-type mooncake_trace --isl-block-size "$((512 / SCALE))"
     --fixed-schedule --synthesis-speedup-ratio "$SPEEDUP" --ui-type none --artifact-dir "$OUT/aiperf")
log "running: ${CMD[*]}"
printf '%q ' "${CMD[@]}" > "$OUT/command.txt"
"${CMD[@]}" 2>&1 | tee "$OUT/aiperf.log"

# 6. Zero errors, every request completed.
"$PY" - "$OUT/aiperf" "$REQUESTS" <<'EOF'
import json, pathlib, sys

root, want = pathlib.Path(sys.argv[1]), int(sys.argv[2])
found = sorted(root.rglob("profile_export_aiperf.json"))
if not found:
    sys.exit(f"[aiperf_check] FAIL: no profile_export_aiperf.json under {root}")
data = json.loads(found[0].read_text())


def stat(name, field="avg"):
    value = data.get(name)
    return value.get(field) if isinstance(value, dict) else value


errors = sum(e.get("count", 1) for e in data.get("error_summary") or [])
completed = int(stat("completed_request_count") or 0)
error_rate = float(stat("request_error_rate") or 0.0)
print(f"[aiperf_check] {completed} of {want} requests completed, {errors} errors ({error_rate:g}%), "
      f"in {stat('benchmark_duration'):.1f} s; TTFT p50 {stat('time_to_first_token', 'p50'):.0f} ms "
      f"p90 {stat('time_to_first_token', 'p90'):.0f} ms; ITL p50 {stat('inter_token_latency', 'p50'):.1f} ms; "
      f"prompt tokens from cache {stat('overall_usage_prompt_cache_read_pct'):.1f}%; "
      f"schedule lag p90 {stat('replay_sched_lag_p90'):.0f} ms ({found[0]})")
mismatches = int(stat("osl_mismatch_count") or 0)
if mismatches:
    print(f"[aiperf_check] {mismatches} requests got an output length other than the trace's")
if errors or error_rate or completed != want or mismatches or data.get("was_cancelled"):
    sys.exit("[aiperf_check] FAIL")
print("[aiperf_check] PASS")
EOF
if grep -q "OSL mismatch" "$OUT/aiperf.log"; then
    die "aiperf warned of output-length mismatches (see $OUT/aiperf.log)"
fi
