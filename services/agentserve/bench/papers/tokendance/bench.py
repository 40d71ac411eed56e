"""One `bench tokendance` run: capacity, storage, round prefill and quality, each its own measure.

    concurrent_agents_ratio  collective over prefix caching, agents served within the SLO at one
                             KV budget, every round served on the trained default model at
                             increasing agent counts (served.py); the same at target scale from
                             the emulated engines' cost model (capacity.py) is in the report
    storage_reduction        bytes per agent, full copies over master + diffs (what real KV
                             stores hold of a real round's KV: bench.tokendance_storage)
    prefill_speedup_vs_pic   round prefill time, per-request reuse over collective (the real engine
                             on the trained default model: engine_round.py)
    top1_agreement, mean_kl  reuse against full recompute at the default fraction, and the curve
                             over fractions (bench.tokendance_quality)

Headline figures are the lower of the two workloads' (GenerativeAgents- and AgentSociety-shaped).
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from agentserve.bench.papers.tokendance.bound import collective_bound
from agentserve.bench.papers.tokendance.capacity import METHODS, CapacitySpec, capacity
from agentserve.bench.papers.tokendance.quality_real import LENGTHS
from agentserve.bench.papers.tokendance.served import POLICIES, Regime, ServedSpec, calibrate, served_capacity
from agentserve.bench.papers.tokendance.workload import RoundShape, agent_society, generative_agents
from agentserve.contracts.segments import DEFAULT_RECOMPUTE_FRACTION

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

FRACTIONS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
STORAGE_FRACTIONS = (0.05, 0.1, 0.15, 0.2, 0.3)
TARGETS = {
    "concurrent_agents_ratio": (2.7, "up to 2.7x"),
    "storage_reduction": (11.0, "11-17x"),
    "prefill_speedup_vs_pic": (1.9, "up to 1.9x"),
    "top1_agreement": (0.95, "-"),
}


@dataclass(frozen=True)
class BenchSpec:
    agents: int = 32  # GenerativeAgents-shaped workload
    society_agents: int = 64  # AgentSociety-shaped workload
    rounds: int = 5
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION
    capacity: CapacitySpec = field(default_factory=CapacitySpec)
    served: ServedSpec = field(default_factory=ServedSpec)  # capacity served on the trained default model
    engine_token_scale: int = 32  # the real-engine round is the workload's tokens divided by this
    engine_round: int = 1  # which gather round the real engine prefills
    quality_agents: int = 8
    quality_rounds: int = 3
    storage_segments: int = 4  # shared segments whose master + diffs are encoded per workload
    threads: int = 1  # torch threads for the real engine (one: what a loaded two-core machine gives steadily)
    real_quality_lengths: tuple[int, ...] = LENGTHS  # SmolLM2's prompts (quality_real.py); () skips it

    def __post_init__(self) -> None:
        if self.agents < 32 or self.society_agents < 32:
            raise ValueError("the all-gather workloads need at least 32 agents")
        if self.rounds < 5:
            raise ValueError(f"rounds must be >= 5, got {self.rounds}")
        if not 1 <= self.engine_round <= self.rounds:
            raise ValueError(f"engine_round must be in [1, rounds={self.rounds}], got {self.engine_round}")
        for name in ("engine_token_scale", "quality_agents", "quality_rounds", "storage_segments"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def shapes(self) -> list[RoundShape]:
        return [generative_agents(self.agents, self.rounds), agent_society(self.society_agents, self.rounds)]


def run_bench(spec: BenchSpec, log: Callable[[str], None] = print) -> dict:
    started = time.monotonic()
    shapes = spec.shapes()
    log("storage: a real round stored in KV stores as full copies and as master + diffs ...")
    storage = {s.name: _storage(spec, s) for s in shapes}
    log("capacity: agents within the SLO per method (cost model) ...")
    capacities = {s.name: _capacities(spec, s, storage[s.name]) for s in shapes}
    model = _model(spec)
    log("capacity served on the trained default model: agents within the SLO per policy ...")
    served = {s.name: _served(spec, s, storage[s.name], model, log) for s in shapes}
    log("round prefill on the trained default model: per request vs collective ...")
    prefill = _prefill(spec, shapes, model)
    log("quality against full recompute, per recompute fraction (trained default model) ...")
    quality = _quality(spec)
    log(f"quality on SmolLM2-135M-Instruct at {list(spec.real_quality_lengths)}-token prompts, per fraction ...")
    real = _real_quality(spec, log)
    headline = {
        "concurrent_agents_ratio": min(c["ratio"] for c in served.values()),
        # The most any collective policy could reach in the same regime (bound.py): the headline's bound.
        "concurrent_agents_ratio_bound": min(c["bound"]["concurrent_agents_ratio_bound"] for c in served.values()),
        "concurrent_agents_ratio_cost_model": min(c["ratio"] for c in capacities.values()),
        "storage_reduction": min(s["default"]["storage_reduction"] for s in storage.values()),
        "storage_reduction_all_kv": min(s["all_kv"]["storage_reduction_all_kv"] for s in storage.values()),
        "prefill_speedup_vs_pic": min(p["prefill_speedup_vs_pic"] for p in prefill),
        # SmolLM2 at the workloads' lengths (its lowest cell at the bench's fraction); else the trained model's.
        "top1_agreement": real["at_fraction"]["top1_agreement"] if real else quality["top1_agreement"],
        "mean_kl": real["at_fraction"]["mean_kl"] if real else quality["mean_kl"],
    }
    targets = {
        k: {"value": headline[k], "target": t, "paper": paper, "met": headline[k] >= t}
        for k, (t, paper) in TARGETS.items()
    }
    return {
        **headline,
        "targets": targets,
        "regime": _regime(spec),
        "workloads": [dataclasses.asdict(s) for s in shapes],
        "served_capacity": served,
        "capacity": capacities,
        "storage": storage,
        "prefill": prefill,
        "quality": quality,
        "quality_real": real,
        "top1_agreement_lengths": real["lengths"] if real else [],
        "quality_chosen_fraction": real["chosen_fraction"] if real else None,
        "fraction_curve": _curve(spec, shapes, storage, quality),
        "elapsed_s": round(time.monotonic() - started, 1),
        "load_average": os.getloadavg(),
    }


def _regime(spec: BenchSpec) -> dict:
    cap, srv = spec.capacity, spec.served
    return {
        "served_capacity": (
            f"trained default model (tiny, fp32, one thread), every gather round served at token scale "
            f"1/{srv.token_scale}, agents prefilled in turn, latency = engine thread CPU time; SLO per "
            f"workload: prefix caching's worst round latency at the workload's own agent count with every "
            f"context resident; KV budget, the same for every policy: "
            + (
                f"{srv.budget_tokens:g} tokens (given)"
                if srv.budget_tokens is not None
                else f"{srv.budget_fraction:g} x prefix caching's KV at full residency there (the default, 0.5, "
                f"holds half the workload's agents' contexts: memory binds for the baseline)"
            )
            + (f", swept over {srv.budget_fractions()}" if srv.budget_sweep else "")
            + "; collective's KV at the storage measurement's diff share"
        ),
        "capacity": (
            f"cost model of the emulated engines: {cap.target_model} on {cap.target_gpu}, KV budget "
            f"{cap.kv_gpus} GPU(s) = {cap.budget_tokens()} tokens, TTFT SLO {cap.slo_s} s for every agent of "
            f"every round, one engine per round, agents prefilled in turn"
        ),
        "engine": (
            f"trained default model (tiny, fp32, CPU {platform.machine()} x{os.cpu_count()}), gather round "
            f"{spec.engine_round}, token scale 1/{spec.engine_token_scale}"
        ),
        "quality": f"trained default model, held-out text, {spec.quality_agents} agents x {spec.quality_rounds} rounds",
        "quality_real": (
            f"SmolLM2-135M-Instruct (Q4_1 weights dequantized, fp32), the project's corpus, prompts of "
            f"{list(spec.real_quality_lengths)} tokens, GenerativeAgents-shaped (4 blocks x 128) and "
            "AgentSociety-shaped (8 x 64) rounds, 4 agents each (the first leads), histories as prefix hits"
        ),
        "storage": (
            f"trained default model (fp32), one round of every agent over {spec.storage_segments} segments of "
            "the workload's output length, held-out text, stored in real KV stores (xor-deflate diffs)"
        ),
        "recompute_fraction": spec.recompute_fraction,
    }


def _storage(spec: BenchSpec, shape: RoundShape) -> dict:
    """The default fraction's figures, and the figures measured at the fraction they project for
    the target (`fraction_for_target`), rounded down to a hundredth."""
    from agentserve.bench.papers.tokendance.storage import measure_storage

    def one(fraction: float) -> dict:
        figures = measure_storage(
            agents=shape.agents,
            segments=spec.storage_segments,
            segment_tokens=shape.output_tokens,
            recompute_fraction=fraction,
        )
        return figures.as_dict()

    default = one(spec.recompute_fraction)
    out = {"default": default, "diff_share": _diff_share(default), "all_kv": all_kv_reduction(shape, default)}
    projected = default["fraction_for_target"]
    if projected is not None and projected < spec.recompute_fraction:
        at = one(math.floor(projected * 100) / 100)
        out["at_projected_fraction"] = {
            k: at[k] for k in ("recompute_fraction", "storage_reduction", "dense_row_bound")
        }
    return out


def all_kv_reduction(shape: RoundShape, figures: dict) -> dict:
    """`storage_reduction_all_kv`: every agent's whole context at the workload's last round (its
    history, private tokens and outputs, and every gathered block it holds, earlier rounds'
    included) in full, over what collective holds of it: the private tokens in full, the gathered
    tokens at the measured shared-segment storage (masters + diffs, `storage_reduction`). The
    served path keeps earlier rounds' blocks as masters + diffs too (a session's stored context
    carries its pieces forward, `engine_service/reused_kv.py`). Projected from the measured bytes
    per token onto the workload's token counts (`workload.rounds`)."""
    from agentserve.bench.papers.tokendance.workload import rounds

    last = rounds(shape)[-1]
    shared = sum(a.history_shared_tokens + a.shared_tokens for a in last)
    total = sum(a.prompt_tokens + a.output_tokens for a in last)
    held = (total - shared) + shared / figures["storage_reduction"]
    return {
        "round_index": last[0].round_index,
        "context_tokens": total,
        "shared_tokens": shared,
        "storage_reduction_all_kv": round(total / held, 3),
    }


def _diff_share(figures: dict) -> float:
    """A sibling's stored bytes over its full copy (diffs only: masters are counted once apart)."""
    return figures["diff_bytes"] / figures["full_copy_bytes"]


def _capacities(spec: BenchSpec, shape: RoundShape, storage: dict) -> dict:
    cap = replace(spec.capacity, recompute_fraction=spec.recompute_fraction, diff_share=storage["diff_share"])
    results = {m: capacity(_sized(shape), cap, m).as_dict() for m in METHODS}
    prefix = results["prefix"]["max_agents"]
    ratio = results["collective"]["max_agents"] / prefix if prefix else float("inf")
    return {"methods": results, "ratio": round(ratio, 3), "diff_share": round(storage["diff_share"], 4)}


def _sized(shape: RoundShape) -> Callable[[int], RoundShape]:
    """The workload's shape at any agent count (the capacity search varies it)."""
    return lambda agents: replace(shape, agents=agents)


def _model(spec: BenchSpec) -> CausalLM:
    import torch

    from agentserve.engine.default_model import ensure_default_model
    from agentserve.engine.loader import load_model

    if spec.threads:
        torch.set_num_threads(spec.threads)
    return load_model(ensure_default_model(), "fp32")[0]


def _served(spec: BenchSpec, shape: RoundShape, storage: dict, model: CausalLM, log: Callable[[str], None]) -> dict:
    """Agents per policy at every budget of the sweep; the headline is the one at the spec's
    `budget_fraction`, chosen before measuring (served.py's docstring)."""
    served = replace(spec.served, recompute_fraction=spec.recompute_fraction, diff_share=storage["diff_share"])
    calibration = calibrate(model, shape, served)
    log(
        f"{shape.name}: SLO {calibration.slo_s:.3f} s per round and full-residency KV "
        f"{calibration.full_kv_tokens:.0f} tokens (prefix caching at {shape.agents} agents, nothing evicted)"
    )
    sweep: list[dict] = []
    for fraction in served.budget_fractions():
        regime = calibration.regime(served, fraction)
        log(f"{shape.name}: KV budget {regime.budget_tokens:.0f} tokens ({_budget_rule(regime)})")
        results = {}
        for policy in POLICIES:
            known = calibration.known(regime) if policy == "prefix" else None
            results[policy] = served_capacity(model, shape, policy, served, regime, known, log).as_dict()
        prefix = results["prefix"]["max_agents"]
        ratio = results["collective"]["max_agents"] / prefix if prefix else float("inf")
        sweep.append(
            {
                "regime": {
                    **dataclasses.asdict(regime),
                    "budget_rule": _budget_rule(regime),
                    "token_scale": served.token_scale,
                    "diff_share": round(served.diff_share, 4),
                },
                "policies": results,
                "ratio": round(ratio, 3),
            }
        )
    # A budget given in tokens comes without a sweep (`ServedSpec` refuses both): one point.
    headline = sweep[served.budget_fractions().index(served.budget_fraction)]
    regime = calibration.regime(served, served.budget_fraction)
    log(f"{shape.name}: the most a collective policy could serve at this SLO and budget (bound.py) ...")
    bound = collective_bound(model, shape, served, regime, headline["policies"]["prefix"]["max_agents"], log)
    log(
        f"{shape.name}: bound {bound.max_agents} agents ({bound.floor.limited_by}; nothing evicted up to "
        f"{bound.memory_agents}), ratio bound {bound.ratio:.3f} against {headline['ratio']:.3f} measured"
    )
    return {
        **headline,
        "bound": bound.as_dict(),
        "full_kv_tokens": calibration.full_kv_tokens,
        "budget_sweep": [
            {
                "budget_fraction": point["regime"]["budget_fraction"],
                "budget_tokens": point["regime"]["budget_tokens"],
                "max_agents": {p: f["max_agents"] for p, f in point["policies"].items()},
                "limited_by": {p: f["limited_by"] for p, f in point["policies"].items()},
                "ratio": point["ratio"],
            }
            for point in sweep
        ],
    }


def _budget_rule(regime: Regime) -> str:
    if regime.budget_fraction is None:
        return "given in tokens"
    return f"{regime.budget_fraction:g} x prefix caching's full-residency KV at the workload's agent count"


def _prefill(spec: BenchSpec, shapes: list[RoundShape], model: CausalLM) -> list[dict]:
    from agentserve.bench.papers.tokendance.engine_round import time_round

    return [
        time_round(s.scaled(spec.engine_token_scale), spec.engine_round, spec.recompute_fraction, model).as_dict()
        for s in shapes
    ]


def _quality(spec: BenchSpec) -> dict:
    from agentserve.bench.papers.tokendance.quality import PromptSet
    from agentserve.bench.papers.tokendance.quality import run as quality_run

    return quality_run(PromptSet(spec.quality_agents, spec.quality_rounds), FRACTIONS, num_threads=spec.threads or 1)


def _real_quality(spec: BenchSpec, log: Callable[[str], None]) -> dict | None:
    """Quality on SmolLM2-135M-Instruct at the workloads' prompt lengths (quality_real.py), and the
    lowest cell at the bench's fraction (the headline); None when no length is asked for."""
    if not spec.real_quality_lengths:
        return None
    from agentserve.bench.papers.tokendance.quality_real import REAL_FRACTIONS, RealPromptSet, run, smollm2

    model, fingerprint, stream = smollm2(spec.threads)
    fractions = tuple(sorted({*REAL_FRACTIONS, spec.recompute_fraction}))
    result = run(model, stream, RealPromptSet(lengths=spec.real_quality_lengths), fractions, log=log)
    at = [c for c in result["cells"] if c["recompute_fraction"] == spec.recompute_fraction]
    result["model_fingerprint"] = fingerprint
    result["at_fraction"] = {
        "recompute_fraction": spec.recompute_fraction,
        "top1_agreement": min(c["top1_agreement"] for c in at),
        "mean_kl": max(c["mean_kl"] for c in at),
    }
    return result


def _curve(spec: BenchSpec, shapes: list[RoundShape], storage: dict, quality: dict) -> list[dict]:
    """Per recompute fraction: quality, and per workload the capacity ratio and storage reduction.
    Storage is encoded at `STORAGE_FRACTIONS` (and the default); other fractions' capacity uses
    a diff share scaled from the default's rows (diff bytes grow with the recomputed rows)."""
    from agentserve.bench.papers.tokendance.storage import measure_storage

    by_fraction = {q["recompute_fraction"]: q for q in quality["curve"]}
    out = []
    for fraction in sorted({*FRACTIONS, spec.recompute_fraction}):
        row: dict = {"recompute_fraction": fraction}
        q = by_fraction.get(fraction)
        if q is not None:
            row.update(top1_agreement=q["top1_agreement"], mean_kl=q["mean_kl"])
        for shape in shapes:
            if fraction == spec.recompute_fraction:
                figures = storage[shape.name]["default"]
            elif fraction in STORAGE_FRACTIONS:
                figures = measure_storage(
                    agents=shape.agents,
                    segments=1,
                    segment_tokens=shape.output_tokens,
                    recompute_fraction=fraction,
                ).as_dict()
            else:
                figures = None
            if figures is None or fraction >= 1.0:
                continue
            cap = replace(spec.capacity, recompute_fraction=fraction, diff_share=_diff_share(figures))
            counts = {m: capacity(_sized(shape), cap, m).max_agents for m in ("prefix", "collective")}
            row[shape.name] = {
                "storage_reduction": round(figures["storage_reduction"], 3),
                "concurrent_agents_ratio": round(counts["collective"] / max(counts["prefix"], 1), 3),
            }
        out.append(row)
    return out
