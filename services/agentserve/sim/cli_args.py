"""`agentserve sim` arguments (kept light: the parser imports them, the simulation runs later)."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.dualpath.cli_args import DEFAULT_TARGET_SLO, counts
from agentserve.bench.papers.dualpath.policies import POLICY_NAMES
from agentserve.bench.papers.dualpath.sweep import AGENTS, CONTEXTS
from agentserve.costmodel.gpus import TARGET_GPUS
from agentserve.costmodel.models import TARGET_MODELS
from agentserve.sim.config import DEFAULT_BLOCK_SIZE, DEFAULT_LAYER_GROUPS
from agentserve.sim.workload import DEFAULT_PROFILE, DEFAULT_TOOL_WAIT_S, PAPER_WORKLOAD


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
    p.add_argument("--policies", default=",".join(POLICY_NAMES), help="comma-separated subset (default all)")
    p.add_argument("--turn-order", default=DEFAULT_TURN_ORDER, help=f"default {DEFAULT_TURN_ORDER}")
    p.add_argument("--slo", default=DEFAULT_TARGET_SLO, help=f"online SLO (default {DEFAULT_TARGET_SLO})")
    p.add_argument("--no-online", dest="online", action="store_false", help="skip the capacity search")
    p.add_argument("--online-turns", type=int, default=5, help="turns per online agent (default 5)")
    p.add_argument("--online-duration", type=float, default=60.0, help="seconds of arrivals per probe (default 60)")
    p.add_argument("--online-start", type=float, default=1.0, help="first probe, agents/s (default 1)")
    p.add_argument("--online-tolerance", type=float, default=0.02, help="bisection's relative tolerance (0.02)")
    p.add_argument("--sweep", action="store_true", help="offline sweep over agent counts and final contexts")
    p.add_argument("--sweep-agents", type=counts, default=AGENTS, help="--sweep's agent counts (default 64,256,1024)")
    p.add_argument(
        "--sweep-contexts", type=counts, default=CONTEXTS, help="--sweep's final contexts (default 32768,65536,131072)"
    )
    p.add_argument("--out", type=Path, help="also write result.json and README.md (sweep.*) there")
    p.add_argument("--progress", action="store_true", help="progress lines on stderr")


DEFAULT_EMULATED_RUN = Path("docs/dualpath/current/dualpath.json")


def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")
    p.add_argument(
        "--emulated",
        type=Path,
        default=DEFAULT_EMULATED_RUN,
        help=f"a stored bench dualpath result to simulate as it ran (default {DEFAULT_EMULATED_RUN})",
    )
