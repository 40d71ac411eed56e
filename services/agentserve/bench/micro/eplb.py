"""`bench eplb`: expert-parallel load balance with and without EPLB, replayed through the cost model.

For each load source (`eplb_loads`: recorded from a MoE engine, and a Zipf stress case) and each
rank count, the loads are replayed window by window on DeepSeek-V3's MoE layout (256 routed
experts in 8 groups, top-8, 58 MoE layers, 8 GPUs per node):

- **without EPLB**: expert e on rank e // (256 / ranks), no spare slots;
- **with EPLB**: `redundant_per_rank` spare slots per GPU, placement re-planned for every window
  from the past windows' loads, exponentially weighted by `history_decay` per window
  (`costmodel.eplb.plan_layer`), then judged on this window's.

Reported per case: `max_over_mean_rank_load` (a window's busiest rank over the mean rank, averaged
over windows and layers; 1.0 is perfect), the MoE layer time ratio (`costmodel.expert_parallel`:
slowest rank's expert compute + dispatch + combine all-to-all over the compute NICs) and decode
TPOT from the cost model: each replayed decode step draws each layer's routing of `decode_batch` sequences
per rank from the window's load shares (normal approximation of the multinomial), and its time is
the non-MoE part (`moe_free_decode_s`) plus the 58 MoE layers' times. The first window only
seeds the first plan and is not scored.

Beside it, `tpot_ms_emulated`: the same steps' MoE times charged by emulated decode engines
(`eplb_emulated`), TPOT measured on the wall clock over the engine's own decode loop.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentserve.bench.common.stats import distribution
from agentserve.bench.micro.eplb_emulated import decode_tpot
from agentserve.bench.micro.eplb_loads import Recording, Windows, recorded_windows, zipf_windows
from agentserve.costmodel.eplb import ClusterLayout, plan_layer, static_placement
from agentserve.costmodel.expert_parallel import (
    DEEPSEEK_V3_MOE,
    ExpertParallelCost,
    MoeLayerShape,
    moe_free_decode_s,
    rank_loads,
)
from agentserve.costmodel.gpus import H800
from agentserve.costmodel.models import DEEPSEEK_V32

SHAPE: MoeLayerShape = DEEPSEEK_V3_MOE
NIC_BYTES_PER_S = 400e9 / 8  # one 400 Gbps compute NIC per GPU (profiles/dualpath-h800.yaml)


@dataclass(frozen=True)
class EplbConfig:
    recorded: Path | None = None  # an engine's --record-expert-load file; None: the Zipf case only
    window_copies: int = 1024  # routed token copies per layer in a recorded re-planning window
    ranks: tuple[int, ...] = (32, 64)
    gpus_per_node: int = 8
    redundant_per_rank: int = 1
    zipf_exponent: float = 1.0
    zipf_windows: int = 12
    decode_batch: int = 128  # sequences per rank in a decode step
    decode_context: int = 8192  # tokens each sequence attends over
    steps_per_window: int = 8
    # The plan's input: the loads of past windows, each window's weight this times the next one's
    # (0: the previous window alone; 1: all past windows alike).
    history_decay: float = 0.5
    seed: int = 0
    # The tokenizer model whose vocabulary emulated decode engines use; None: no emulated TPOT.
    emulated_vocabulary: Path | None = None
    time_dilation: float = 1.0  # the emulated engines' local seconds per target second

    def __post_init__(self) -> None:
        for rank_count in self.ranks:
            if rank_count <= 0 or SHAPE.routed_experts % rank_count or rank_count % self.gpus_per_node:
                raise ValueError(f"ranks {rank_count} must divide {SHAPE.routed_experts} experts into whole nodes")
        if not 0 <= self.history_decay <= 1:
            raise ValueError(f"history_decay must be in [0, 1], got {self.history_decay}")
        if self.redundant_per_rank < 0 or self.decode_batch <= 0 or self.steps_per_window <= 0:
            raise ValueError("redundant_per_rank must be >= 0, decode_batch and steps_per_window positive")
        if not self.time_dilation > 0:
            raise ValueError(f"time_dilation must be positive, got {self.time_dilation}")


def imbalance(loads: list[float]) -> float:
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean else 1.0


def sampled_step(shares: list[float], copies: float, rng: random.Random) -> list[float]:
    """One step's copies per expert: a normal approximation of `copies` multinomial draws."""
    return [max(0.0, rng.gauss(copies * p, (copies * p * (1 - p)) ** 0.5)) for p in shares]


def replay(windows: Windows, ranks: int, config: EplbConfig) -> dict[str, Any]:
    experts = len(windows[0][0])
    cost = ExpertParallelCost(SHAPE, H800, ranks, config.gpus_per_node, NIC_BYTES_PER_S)
    balanced = ClusterLayout(ranks, config.gpus_per_node, experts // ranks + config.redundant_per_rank)
    plain = ClusterLayout(ranks, config.gpus_per_node, experts // ranks)
    static = static_placement(experts, plain)
    rng = random.Random(config.seed)
    step_copies = config.decode_batch * ranks * SHAPE.top_k
    moe_free = moe_free_decode_s(DEEPSEEK_V32, H800, SHAPE, [config.decode_context] * config.decode_batch)
    ratio: dict[str, list[float]] = {"eplb": [], "static": []}
    layer_s: dict[str, list[float]] = {"eplb": [], "static": []}
    moe_step_s: dict[str, list[float]] = {"eplb": [], "static": []}
    seen = [[0.0] * experts for _ in windows[0]]
    for previous, current in zip(windows, windows[1:]):
        for layer, loads in enumerate(previous):
            decay = config.history_decay
            seen[layer] = [decay * old + new for old, new in zip(seen[layer], loads, strict=True)]
        plans = [plan_layer(loads, SHAPE.expert_groups, balanced) for loads in seen]
        for layer, loads in enumerate(current):
            ratio["eplb"].append(imbalance(rank_loads(loads, plans[layer], ranks)))
            ratio["static"].append(imbalance(rank_loads(loads, static, ranks)))
        shares = [[x / (sum(loads) or 1) for x in loads] for loads in current]
        for _ in range(config.steps_per_window):
            step = {"eplb": 0.0, "static": 0.0}
            for layer in range(len(current)):
                copies = sampled_step(shares[layer], step_copies, rng)
                for name, placement, layout in (("eplb", plans[layer], balanced), ("static", static, plain)):
                    t = cost.layer_time(rank_loads(copies, placement, ranks), layout.slots_per_rank).total_s
                    layer_s[name].append(t)
                    step[name] += t * SHAPE.moe_layers / len(current)
            for name in step:
                moe_step_s[name].append(step[name])
    tpot = {name: [moe_free + s for s in steps] for name, steps in moe_step_s.items()}
    summary = _summary(ranks, balanced, ratio, layer_s, tpot)
    if config.emulated_vocabulary is not None:
        emulated = {
            name: decode_tpot(
                config.emulated_vocabulary,
                SHAPE,
                steps,
                config.decode_batch,
                config.decode_context,
                config.time_dilation,
            )
            for name, steps in moe_step_s.items()
        }
        summary["tpot_ms_emulated"] = emulated["eplb"]
        summary["tpot_ms_emulated_without_eplb"] = emulated["static"]
        summary["tpot_p99_ratio_emulated"] = round(emulated["eplb"]["p99"] / emulated["static"]["p99"], 4)  # type: ignore[operator]
    return summary


def _summary(
    ranks: int,
    layout: ClusterLayout,
    ratio: dict[str, list[float]],
    layer_s: dict[str, list[float]],
    tpot: dict[str, list[float]],
) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    tpot_ms = {name: distribution(values, scale=1e3) for name, values in tpot.items()}
    return {
        "ranks": ranks,
        "slots_per_rank_eplb": layout.slots_per_rank,
        "max_over_mean_rank_load": round(mean(ratio["eplb"]), 4),
        "max_over_mean_rank_load_without_eplb": round(mean(ratio["static"]), 4),
        "max_over_mean_rank_load_worst": round(max(ratio["eplb"]), 4),
        "max_over_mean_rank_load_worst_without_eplb": round(max(ratio["static"]), 4),
        "moe_layer_ms": round(mean(layer_s["eplb"]) * 1e3, 4),
        "moe_layer_ms_without_eplb": round(mean(layer_s["static"]) * 1e3, 4),
        "moe_layer_time_ratio": round(mean(layer_s["eplb"]) / mean(layer_s["static"]), 4),
        "tpot_ms": tpot_ms["eplb"],
        "tpot_ms_without_eplb": tpot_ms["static"],
        "tpot_p99_ratio": round(tpot_ms["eplb"]["p99"] / tpot_ms["static"]["p99"], 4),  # type: ignore[operator]
    }


def run(config: EplbConfig) -> dict[str, Any]:
    experts, layers = SHAPE.routed_experts, SHAPE.moe_layers
    sources: dict[str, Windows] = {}
    regime: dict[str, Any] = {
        **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()},
        "target": f"{DEEPSEEK_V32.key} MoE layout: {experts} experts in {SHAPE.expert_groups} groups, "
        f"top-{SHAPE.top_k}, {layers} MoE layers, on {H800.key} with a 400 Gbps compute NIC per GPU",
        "tpot": "cost model: step times over a replayed decode (not the simulator)",
    }
    if config.emulated_vocabulary is not None:
        regime["tpot_emulated"] = (
            f"emulated decode engines (LLMEngine, emulated compute, time dilation {config.time_dilation}), "
            f"{config.decode_batch} sequences of {config.decode_context} tokens sharing a cached prefix, "
            "each step's MoE layers charged at the slowest rank's time under the replay's routing; "
            "wall-clock gaps between full-batch steps over the dilation"
        )
    if config.recorded is not None:
        recording = Recording.read(config.recorded)
        sources["recorded"] = recorded_windows(recording, config.window_copies, experts, layers, config.seed)
        regime["recorded_model"] = {
            "experts": recording.num_experts,
            "top_k": recording.top_k,
            "sparse_layers": len(recording.layers),
            "forwards": len(recording.forwards),
            "windows": len(sources["recorded"]),
            "mapping": f"each recorded expert stands for {experts // recording.num_experts} target experts "
            "of equal load, scattered by a seeded permutation per layer; target layer l replays recorded "
            f"layer l % {len(recording.layers)}",
        }
    step_copies = config.decode_batch * SHAPE.top_k * config.steps_per_window
    sources["zipf"] = zipf_windows(experts, layers, config.zipf_windows, config.zipf_exponent, step_copies, config.seed)
    cases = {name: {str(r): replay(windows, r, config) for r in config.ranks} for name, windows in sources.items()}
    return {"regime": regime, "cases": cases}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# bench eplb",
        "",
        f"Target: {result['regime']['target']}. TPOT: {result['regime']['tpot']}.",
        "",
        "| loads | ranks | max/mean rank load, EPLB | without | MoE layer time ratio | TPOT p99 ms, EPLB | without "
        "| emulated TPOT p99 ms, EPLB | without |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_ranks in result["cases"].items():
        for ranks, r in by_ranks.items():
            emulated = r.get("tpot_ms_emulated"), r.get("tpot_ms_emulated_without_eplb")
            lines.append(
                f"| {name} | {ranks} | {r['max_over_mean_rank_load']:.3f} | "
                f"{r['max_over_mean_rank_load_without_eplb']:.3f} | {r['moe_layer_time_ratio']:.3f} | "
                f"{r['tpot_ms']['p99']:.2f} | {r['tpot_ms_without_eplb']['p99']:.2f} | "
                + " | ".join("-" if e is None else f"{e['p99']:.2f}" for e in emulated)
                + " |"
            )
    return "\n".join(lines) + "\n"
