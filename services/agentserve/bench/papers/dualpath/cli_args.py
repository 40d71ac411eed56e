"""Arguments of `agentserve bench dualpath` (no heavy imports: the CLI parser builds these for
every command). Defaults are the scale the default invocation runs at on a 2-core machine."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.dualpath.policies import POLICY_NAMES
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER, LOAD_ORDERS
from agentserve.scheduler.turn_order import TURN_ORDERS

# The default scale: what the default invocation (four offline runs, the CPU floor, two capacity
# searches) fits in 20 minutes on a 2-core machine at a dilation where modelled time dwarfs the
# processes' own. At least four agents per prefill engine keep its storage NIC's read queue from
# running dry: with two, each agent's own chain of turns (decode, hand-off, its next turn) leaves
# the baseline's prefill storage NICs idle most of the run however the turns are shaped. Six (12
# agents) keep dualpath's prefill engines supplied too: with four, a turn reaches its engine just
# after its agent's previous turn decoded and the engine waits, so dualpath's JCT sits further
# above its compute bound; each agent more brings it closer, but the baseline's offline run grows
# with the agents, and twelve is what the 20-minute budget holds (docs/dualpath.md has the runs).
DEFAULT_AGENTS = 12
# The paper's turn (DualPath: 98.7% hit, 32.7K context, 429 new tokens a turn): 30 turns growing
# from 20K to 32K append ~408 new tokens a turn to ~26.6K cached (hit 0.984), which an engine's
# 50 Gbps storage-NIC share reads in 1.46x the time those tokens compute. The store keeps 256-token
# blocks and, with tail blocks (default), each context's partial last block too, so a turn computes
# only its new tokens (and its context's last token) and reads 1.47x as long as it computes
# (`regime.modelled`); without them (`--no-tail-blocks`) it also recomputes that block (~125
# tokens) and reads 1.12x as long.
# The first turn computes 512 tokens, the agent's task after the 19.5K of system prompt and tool
# definitions every agent shares, cached: the paper's 98.7% hit is its per-turn append over its
# context (429 / 32.7K), so its trajectories' first turns weigh no more than a later turn. A
# shorter shared prefix leaves more of each first turn to compute: with `--shared-prefix 16384`
# (4,096 tokens a first turn) the first turns are a large share of a prefill engine's compute, all
# at the run's start, and bound `dualpath_jct_reduction_over_layerwise` whatever the policies do
# (`limits`).
DEFAULT_FIRST_CONTEXT = 20480
DEFAULT_FINAL_CONTEXT = 32768
DEFAULT_SHARED_PREFIX = 19968
DEFAULT_TIME_DILATION = 10.0
# At 64 tokens a turn has four times the blocks, and its TTFT grows by their per-block Python work
# (docs/dualpath.md).
DEFAULT_BLOCK_SIZE = 256
# The paper's online SLO, in target seconds (local bounds are these times the time dilation).
DEFAULT_TARGET_SLO = "ttft_p90=4000ms,tpot_p90=50ms"


def counts(text: str) -> tuple[int, ...]:
    """`"64,256,1024"` -> (64, 256, 1024): an argparse type, so a bad list is a usage error."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        values = ()
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload (target tokens)")
    w.add_argument(
        "--agents",
        type=int,
        default=DEFAULT_AGENTS,
        help=f"agents submitted at once offline (default {DEFAULT_AGENTS})",
    )
    w.add_argument("--turns", type=int, default=30, help="turns per agent (default 30)")
    w.add_argument(
        "--first-context",
        type=int,
        default=DEFAULT_FIRST_CONTEXT,
        help=f"first turn's prompt, the shared prefix cached, the rest new (default {DEFAULT_FIRST_CONTEXT})",
    )
    w.add_argument(
        "--final-context",
        type=int,
        default=DEFAULT_FINAL_CONTEXT,
        help=f"last turn's prompt (default {DEFAULT_FINAL_CONTEXT})",
    )
    w.add_argument("--output-tokens", type=int, default=16, help="output tokens per turn (default 16)")
    w.add_argument(
        "--shared-prefix",
        type=int,
        default=DEFAULT_SHARED_PREFIX,
        help="tokens of the first context every agent shares (system prompt, tools), cached before the run "
        f"(default {DEFAULT_SHARED_PREFIX})",
    )
    w.add_argument("--seed", type=int, default=0)
    c = p.add_argument_group("cluster")
    c.add_argument("--prefill", type=int, default=2, help="prefill engines (default 2)")
    c.add_argument("--decoders", type=int, default=4, help="decode engines (default 4)")
    c.add_argument("--profile", default="dualpath-h800", help="hardware profile (default dualpath-h800)")
    c.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help=f"tokens per KV block (default {DEFAULT_BLOCK_SIZE}: fewer blocks, less Python work per turn)",
    )
    c.add_argument(
        "--no-tail-blocks",
        dest="tail_blocks",
        action="store_false",
        help="store whole KV blocks only: every later turn recomputes its context's partial last block "
        "(default: the scheduler's tail blocks store and reuse it)",
    )
    c.add_argument(
        "--turn-order",
        default=DEFAULT_TURN_ORDER,
        choices=list(TURN_ORDERS),
        help=f"the scheduler's order among a prefill engine's waiting turns of equal priority, every policy's "
        f"(scheduler/turn_order.py): least-served puts the agent with the fewest completed turns first, arrival "
        f"is first come first served (default {DEFAULT_TURN_ORDER})",
    )
    c.add_argument(
        "--load-order",
        default=DEFAULT_LOAD_ORDER,
        choices=LOAD_ORDERS,
        help="concurrent: a prefill engine's loads all start at once, sharing its NICs (default); fifo: "
        "they take the store (and each relay) one at a time in arrival order (prefill/load_lanes.py). "
        "Every policy",
    )
    c.add_argument(
        "--compute",
        default="emulated",
        choices=["emulated", "real"],
        help="emulated: engines take the target model's time from the cost model (default); real: run the "
        "tiny model (contexts must fit it)",
    )
    c.add_argument("--target-model", default="deepseek-v3.2", help="emulated compute's target model")
    c.add_argument(
        "--kv-dtype",
        default="auto",
        choices=["auto", "fp8_e4m3"],
        help="every engine's KV (default auto: the model's dtype; fp8_e4m3: held, stored and moved as FP8, "
        "an emulated engine charging the target's FP8 bytes)",
    )
    c.add_argument(
        "--time-dilation",
        type=float,
        default=DEFAULT_TIME_DILATION,
        help=f"emulated: local seconds per target second (default {DEFAULT_TIME_DILATION:g}, so the modelled time "
        "dwarfs what the processes themselves take); bandwidths are divided by it",
    )
    c.add_argument(
        "--kv-pool-tokens",
        type=int,
        default=None,
        help="emulated: KV pool tokens per prefill engine (default: 1.25 final contexts, DualPath's regime where a "
        "prefill engine's HBM holds about one context; 0: the target GPU's whole HBM)",
    )
    c.add_argument(
        "--local-prefill-tokens-per-s",
        type=float,
        default=0.0,
        help="real compute: the local prefill speed the profile is scaled by (0: each engine measures)",
    )
    r = p.add_argument_group("runs")
    r.add_argument(
        "--policies",
        default=",".join(POLICY_NAMES),
        help=f"comma-separated subset of {', '.join(POLICY_NAMES)} (default all)",
    )
    r.add_argument(
        "--slo", default=DEFAULT_TARGET_SLO, help=f"online SLO in target time (default {DEFAULT_TARGET_SLO})"
    )
    r.add_argument("--no-online", dest="online", action="store_false", help="skip the capacity search")
    r.add_argument(
        "--online-turns",
        type=int,
        default=5,
        help="turns per online agent: the offline agents' last ones, from a cached shared context (default 5; "
        "0 = whole agents)",
    )
    r.add_argument("--online-duration", type=float, default=30.0, help="local seconds of arrivals per probe")
    r.add_argument("--online-start", type=float, default=0.2, help="first probe, agents/s local (default 0.2)")
    r.add_argument("--online-max", type=float, default=0.8, help="highest probe, agents/s local (default 0.8)")
    r.add_argument(
        "--online-probes",
        type=int,
        default=3,
        help="probes per policy (default 3: doubling from --online-start until one fails, then one bisection)",
    )
    r.add_argument("--no-floor", dest="floor", action="store_false", help="skip the CPU-floor run")
    r.add_argument(
        "--one-at-a-time",
        dest="concurrent",
        action="store_false",
        help="run the policies one after another instead of at once (each on its own cluster either way; "
        "--sweep always does)",
    )
    r.add_argument("--sweep", action="store_true", help="offline sweep: agents 64/256/1024, contexts 32K/64K/128K")
    r.add_argument(
        "--sweep-agents",
        type=counts,
        default=(64, 256, 1024),
        help="--sweep's agent counts, comma-separated (default 64,256,1024)",
    )
    r.add_argument(
        "--sweep-contexts",
        type=counts,
        default=(32768, 65536, 131072),
        help="--sweep's final contexts, comma-separated (default 32768,65536,131072)",
    )
    r.add_argument("--out", type=Path, help="results directory (default artifacts/bench/papers/dualpath-<time>)")
    r.add_argument("--progress", action="store_true", help="progress bars on stderr")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
