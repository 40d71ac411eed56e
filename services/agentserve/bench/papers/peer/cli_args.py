"""Arguments of `agentserve bench peer` (no heavy imports: the CLI parser builds these for every
command; `command` imports the bench only when it runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.papers.peer.llama_server import LlamaServerConfig
from agentserve.bench.papers.peer.workload import PeerWorkloadSpec

SYSTEMS = ("agentserve", "llama-server")
# Fixed before any run: an interactive agent wants its first token within 2 s and at least
# 5 tokens/s after it, on every turn of the session.
DEFAULT_SLO = "ttft_p90=2000ms,tpot_p90=200ms"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        type=Path,
        help="the GGUF both systems serve (default SmolLM2-135M-Instruct.Q4_1.gguf in the models cache)",
    )
    w = p.add_argument_group("workload (TraceLab's coding-agent sessions)")
    w.add_argument("--sessions", type=int, default=PeerWorkloadSpec.sessions, help="concurrent sessions (default 32)")
    w.add_argument("--turns", type=int, default=PeerWorkloadSpec.turns, help="turns per session (default 4)")
    w.add_argument(
        "--token-scale",
        type=int,
        default=PeerWorkloadSpec.token_scale,
        help="recorded token counts / this (default 32)",
    )
    p.add_argument("--slo", default=DEFAULT_SLO, help=f"bounds every turn of a session must meet ({DEFAULT_SLO})")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="which to run, in this order (default both)")
    a = p.add_argument_group("agentserve (up --local)")
    a.add_argument("--prefill", type=int, default=1, help="prefill engines (default 1, up's)")
    a.add_argument("--decoders", type=int, default=2, help="decode engines (default 2, up's)")
    ls = p.add_argument_group("llama-server")
    ls.add_argument(
        "--llama-server", type=Path, help="its binary (default: built once by scripts/build_llama_server.sh)"
    )
    ls.add_argument("--slots", type=int, help="--parallel (default: one slot per session)")
    ls.add_argument("--ctx-per-slot", type=int, default=LlamaServerConfig.ctx_per_slot, help="(default 2048)")
    ls.add_argument("--cache-reuse", type=int, default=LlamaServerConfig.cache_reuse, help="(default 256)")
    ls.add_argument("--threads", type=int, default=LlamaServerConfig.threads, help="(default 2)")
    p.add_argument("--out", type=Path, help="results directory (default artifacts/bench/peer-<time>)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON line")


def command(args: argparse.Namespace) -> dict:
    from agentserve.bench.papers.peer.cli import peer

    return peer(args)
