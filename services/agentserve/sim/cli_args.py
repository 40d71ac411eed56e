"""`agentserve sim` arguments (kept light: the parser imports them, the simulation runs later)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.dualpath.cli_args import DEFAULT_TARGET_SLO, counts
from agentserve.bench.papers.dualpath.policies import POLICY_NAMES
from agentserve.bench.papers.dualpath.sweep import CONTEXTS
from agentserve.costmodel.gpus import TARGET_GPUS
from agentserve.costmodel.models import TARGET_MODELS
from agentserve.sim.config import DEFAULT_BLOCK_SIZE, DEFAULT_LAYER_GROUPS
from agentserve.sim.workload import DEFAULT_PROFILE, DEFAULT_TOOL_WAIT_S, PAPER_WORKLOAD

# The paper's offline sweep: agents x maximum agent length (`sim/sweep.py`).
SWEEP_AGENTS = (64, 256, 512, 1024)
SWEEP_CONTEXTS = CONTEXTS


def add_dualpath_arguments(p: argparse.ArgumentParser) -> None:
    w = PAPER_WORKLOAD
    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help=f"hardware profile (default {DEFAULT_PROFILE})")
    p.add_argument(
        "--model", default="", choices=["", *TARGET_MODELS], help="target model (default: the profile's, deepseek-v3.2)"
    )
    p.add_argument("--gpu", default="h800", choices=list(TARGET_GPUS), help="target GPU (default h800)")
    p.add_argument(
        "--kv-dtype",
        default="auto",
        choices=["auto", "fp8_e4m3"],
        help="KV as stored and moved: auto = the target model's; fp8_e4m3 halves a BF16 KV's bytes (default auto)",
    )
    p.add_argument("--agents", type=int, default=w.agents, help=f"agents offline (default {w.agents})")
    p.add_argument("--turns", type=int, default=w.turns, help=f"turns per agent (default {w.turns})")
    p.add_argument("--first-context", type=int, default=w.first_context, help="first turn's prompt tokens")
    p.add_argument("--final-context", type=int, default=w.final_context, help="last turn's prompt tokens")
    p.add_argument("--shared-prefix", type=int, default=w.shared_prefix, help="first-context tokens every agent shares")
    p.add_argument("--output-tokens", type=int, default=w.output_tokens, help="tokens decoded per turn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tool-wait", type=float, default=DEFAULT_TOOL_WAIT_S, help="mean tool wait between turns, s")
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, help="KV block tokens")
    p.add_argument(
        "--layer-groups", type=int, default=DEFAULT_LAYER_GROUPS, help="layerwise event granularity (layer groups)"
    )
    p.add_argument(
        "--prefill-pool-blocks",
        type=int,
        default=0,
        help="KV blocks of each prefill engine's pool (default 0: what the target GPU's HBM holds after the weights)",
    )
    p.add_argument(
        "--decode-pool-blocks",
        type=int,
        default=0,
        help="KV blocks of each decode engine's pool (default 0: what the target GPU's HBM holds after the weights)",
    )
    p.add_argument("--policies", default=",".join(POLICY_NAMES), help="comma-separated subset (default all)")
    p.add_argument("--turn-order", default=DEFAULT_TURN_ORDER, help=f"default {DEFAULT_TURN_ORDER}")
    p.add_argument(
        "--slo",
        default=DEFAULT_TARGET_SLO,
        help=f"online SLO (default {DEFAULT_TARGET_SLO}); ttft_first_pNN / ttft_later_pNN bound first and later "
        "turns apart, each at its own percentile, and each probe names the term that binds",
    )
    p.add_argument("--no-online", dest="online", action="store_false", help="skip the capacity search")
    p.add_argument("--online-turns", type=int, default=5, help="turns per online agent (default 5)")
    p.add_argument("--online-duration", type=float, default=60.0, help="seconds of arrivals per probe (default 60)")
    p.add_argument("--online-start", type=float, default=1.0, help="first probe, agents/s (default 1)")
    p.add_argument("--online-tolerance", type=float, default=0.02, help="bisection's relative tolerance (0.02)")
    p.add_argument(
        "--sweep", action="store_true", help="offline sweep: every agent count at every maximum agent length"
    )
    p.add_argument(
        "--sweep-agents", type=counts, default=SWEEP_AGENTS, help="--sweep's agent counts (default 64,256,512,1024)"
    )
    p.add_argument(
        "--sweep-contexts",
        type=counts,
        default=SWEEP_CONTEXTS,
        help="--sweep's maximum agent lengths, final contexts (default 32768,65536,131072)",
    )
    p.add_argument("--out", type=Path, help="also write result.json and README.md (sweep.*) there")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")


VALIDATION_CONFIGS = ("pool-bound", "full-hbm", "two-prefill")  # sim/validate.py's CHECKS


def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")
    p.add_argument(
        "--configs",
        default=",".join(VALIDATION_CONFIGS),
        help=f"small configurations to run emulated and simulated (default {','.join(VALIDATION_CONFIGS)})",
    )
    p.add_argument("--policies", default="", help="comma-separated subset of bench dualpath's policies (default all)")
    p.add_argument(
        "--emulated",
        type=Path,
        nargs="*",
        default=None,
        help="stored bench dualpath result JSONs to simulate as they ran, instead of running the configurations",
    )
    p.add_argument("--out", type=Path, help="where the emulated runs' files go (default artifacts/sim/validate-<time>)")


AGENTAWARE_RATES = "0.25,0.5,1.0,2.0"


def add_agentaware_arguments(p: argparse.ArgumentParser) -> None:
    from agentserve.bench.papers.agentaware.workload import DEFAULT_TRACE, PREDICTIONS
    from agentserve.sim.agentaware.config import DEFAULT_CHUNK_TOKENS
    from agentserve.sim.agentaware.policies import POLICY_NAMES as AWARE_POLICIES

    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")
    p.add_argument("--model", default="dense-27b", choices=list(TARGET_MODELS), help="target model (default dense-27b)")
    p.add_argument("--gpu", default="h800", choices=list(TARGET_GPUS), help="target GPU (default h800)")
    p.add_argument("--engines", type=int, default=8, help="engines, one GPU each (default 8)")
    p.add_argument("--engines-per-node", type=int, default=8, help="engines sharing a node's storage NIC (default 8)")
    p.add_argument("--snic-gbps", type=float, default=400.0, help="a node's storage NIC bandwidth (default 400)")
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE, help="KV block tokens")
    p.add_argument("--chunk-tokens", type=int, default=DEFAULT_CHUNK_TOKENS, help="prompt tokens per iteration")
    p.add_argument("--pool-blocks", type=int, default=0, help="KV blocks per engine (default: what HBM holds)")
    p.add_argument("--jobs", type=int, default=60, help="jobs, alternately code-writer and deep-research (default 60)")
    p.add_argument("--width", type=int, default=4, help="coders or researchers per job (default 4)")
    p.add_argument("--rounds", type=int, default=4, help="turns per worker (default 4)")
    p.add_argument("--system-tokens", type=int, default=2048, help="shared system prompt tokens (default 2048)")
    p.add_argument("--first-tokens", type=int, default=4096, help="a session's first message tokens (default 4096)")
    p.add_argument("--new-tokens", type=int, default=1024, help="a later turn's message tokens (default 1024)")
    p.add_argument("--output-tokens", type=int, default=128, help="tokens decoded per turn (default 128)")
    p.add_argument("--prediction", default="median", choices=list(PREDICTIONS), help="what callers predict")
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="TraceLab round trace the tool times come from")
    p.add_argument(
        "--rates", type=rates, default=AGENTAWARE_RATES, help=f"job arrival rates, jobs/s ({AGENTAWARE_RATES})"
    )
    p.add_argument(
        "--compare-rate", type=float, default=None, help="the rate the keys compare at (default the highest)"
    )
    p.add_argument("--policies", default=",".join(AWARE_POLICIES), help="comma-separated subset (default all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="also write result.json and README.md there")


def rates(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates must be comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"--rates must be positive numbers, got {text!r}")
    return values
