"""`agentserve sim dualpath`: DualPath's figures at the paper's scale, every policy simulated.

Offline, every policy serves the same agents, all submitted at once; JCT is the time to the last
agent's last turn. Online, agents arrive as a Poisson process for `online_duration_s` (each runs the
offline agents' last `online_turns` turns from a cached history, `late_turns`), and a probe passes
when its turns meet the SLO (`bench/papers/replay/slo.py`); the capacity is the highest arrival
rate that passes, found by the benches' capacity search (`capacity.search`: doubling until a probe
fails, then bisection to `online_tolerance`). The must-show figures and their targets are `bench
dualpath`'s own (`ratios.must_show`, `ratios.verdicts`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.dualpath import ratios, regime
from agentserve.bench.papers.dualpath.cli_args import DEFAULT_TARGET_SLO
from agentserve.bench.papers.dualpath.policies import POLICY_NAMES
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate, late_turns, shape
from agentserve.bench.papers.replay import capacity as cap
from agentserve.bench.papers.replay.slo import SLO
from agentserve.fabric.profiles import load_profile
from agentserve.prefill.pool_budget import prompt_hold_blocks
from agentserve.sim.config import SimConfig
from agentserve.sim.policies import PolicySet, resolve
from agentserve.sim.run import figures, simulate
from agentserve.sim.workload import DEFAULT_PROFILE, DEFAULT_TOOL_WAIT_S, PAPER_WORKLOAD, poisson_arrivals


@dataclass(frozen=True)
class DualPathSimSpec:
    workload: AgentWorkloadSpec = PAPER_WORKLOAD
    config: SimConfig = field(default_factory=lambda: SimConfig.from_profile(load_profile(DEFAULT_PROFILE)))
    profile: str = DEFAULT_PROFILE
    policies: tuple[str, ...] = POLICY_NAMES
    turn_order: str = DEFAULT_TURN_ORDER
    tool_wait_s: float = DEFAULT_TOOL_WAIT_S
    online: bool = True
    online_policies: tuple[str, ...] = ("baseline", "dualpath")
    online_turns: int = 5
    online_duration_s: float = 60.0
    online_start: float = 1.0  # agents/s, the search's first probe
    online_tolerance: float = 0.02
    slo: str = DEFAULT_TARGET_SLO

    def __post_init__(self) -> None:
        for name in self.policies:
            resolve(name, self.turn_order)  # an unknown name or setting fails here, not mid-run
        if missing := set(self.online_policies) - set(self.policies):
            raise ValueError(f"online policies {sorted(missing)} are not among the policies run")
        if self.tool_wait_s < 0:
            raise ValueError(f"tool_wait_s must be >= 0, got {self.tool_wait_s}")
        if self.online_turns < 1 or not self.online_duration_s > 0:
            raise ValueError("online_turns must be >= 1 and online_duration_s positive")
        SLO.parse(self.slo)
        self.search_spec()

    def search_spec(self) -> cap.SearchSpec:
        return cap.SearchSpec(start=self.online_start, factor=2.0, rel_tolerance=self.online_tolerance, max_probes=16)


def _probe(spec: DualPathSimSpec, policy: PolicySet, rate: float, slo: SLO) -> dict[str, Any]:
    arrivals = poisson_arrivals(rate, spec.online_duration_s, spec.workload.seed)
    agents = late_turns(spec.workload, len(arrivals), spec.online_turns)
    result = simulate(spec.config, policy, generate(agents, "online"), arrivals, spec.tool_wait_s, spec.workload.seed)
    run = figures(result)
    attainment = slo.attained(result.records)
    check = slo.check(result.records)
    return {
        "load": rate,
        "agents": len(arrivals),
        "turns_total": run["turns_total"],
        "attainment": round(attainment, 6),
        # The share of turns within every bound (the bench's predicate), and each term at its own
        # percentile over the turns it applies to, so first-turn and later-turn TTFT hold apart.
        "meets_slo": attainment >= slo.attainment and check.meets,
        "binds": check.binding.term.name,
        "slo_check": check.to_json(),
        "ttft_p90_ms": run["ttft_p90_ms"],
        "tpot_p90_ms": run["tpot_p90_ms"],
        "wall_s": round(result.wall_s, 3),
    }


def online_capacity(spec: DualPathSimSpec, policy: PolicySet) -> dict[str, Any]:
    slo = SLO.parse(spec.slo)
    probes: list[dict[str, Any]] = []

    async def probe(rate: float) -> bool:
        entry = _probe(spec, policy, rate, slo)
        probes.append(entry)
        return bool(entry["meets_slo"])

    found = asyncio.run(cap.search(probe, spec.search_spec()))
    failing = [p for p in probes if p["load"] == found.lowest_failing]
    return {
        "capacity_agents_per_s": found.capacity,
        "lowest_failing_agents_per_s": found.lowest_failing,
        # The term that fails first as the load grows: the binding one at the lowest failing load.
        "binds": failing[0]["binds"] if failing else None,
        "converged": found.converged,
        "probes": probes,
    }


def bounds(spec: DualPathSimSpec) -> dict[str, Any]:
    """What the cost model allows a saturated cluster, per later turn (the physical limits), and
    the most the must-show ratios can be under them (each ratio's best policy at its limit, the
    policy it is compared with at its slowest).

    - Storage: a node's storage NIC reads `later_turn_read_gb` a turn; the baseline and layerwise
      read over the prefill nodes' NICs alone, DualPath over every node's.
    - Compute: the prefill GPUs, `later_turn_prefill_compute_s` a turn each.
    - Pool (without layerwise): a turn holds its prompt's blocks of its engine's pool from its
      load's start to its handoff's end, at least its read at the engine's share of the node's
      storage NIC, its compute and its handoff over the GPU's compute NIC; so an engine whose pool
      holds `prefill_pool_contexts` such prompts serves that many per hold time, at least, when
      every engine's loads share the node's NIC (a lone load runs faster). Layerwise stages one
      layer group's KV at a time, and its pool does not bind.
    """
    workload = generate(spec.workload)
    config = spec.config
    share = config.snic_share_bytes_per_s
    later = regime.later_turns(workload, config.cost(), share * 8 / 1e9, config.block_size, True)
    read_bytes = later.read_s * share / later.turns
    compute_s = later.compute_s / later.turns
    prompt_tokens = (later.cached_tokens + later.new_tokens) / later.turns
    handoff_s = prompt_tokens * config.kv_bytes_per_token / (config.cnic_gbps * 1e9 / 8)
    hold_s = read_bytes / share + compute_s + handoff_s
    pool_contexts = config.pool_blocks("prefill") / prompt_hold_blocks(round(prompt_tokens), config.block_size)
    prefills, decodes = config.engines("prefill"), config.engines("decode")
    prefill_snic = prefills * share / read_bytes
    every_snic = (prefills + decodes) * share / read_bytes
    compute = prefills / compute_s
    pool = prefills * pool_contexts / hold_s
    baseline = min(prefill_snic, compute, pool)
    layerwise = min(prefill_snic, compute)
    dualpath = min(every_snic, compute)
    return {
        "later_turn_read_gb": round(read_bytes / 1e9, 4),
        "later_turn_prefill_compute_s": round(compute_s, 5),
        "later_turn_handoff_s": round(handoff_s, 5),
        "prefill_snic_turns_per_s": round(prefill_snic, 3),
        "every_snic_turns_per_s": round(every_snic, 3),
        "prefill_compute_turns_per_s": round(compute, 3),
        "prefill_pool_contexts": round(pool_contexts, 2),
        "prefill_pool_turns_per_s": round(pool, 3),
        "baseline_bound_turns_per_s": round(baseline, 3),
        "layerwise_bound_turns_per_s": round(layerwise, 3),
        "dualpath_bound_turns_per_s": round(dualpath, 3),
        "offline_ratio_bound": round(dualpath / baseline, 4),
        "layerwise_jct_reduction_bound": round(1 - baseline / layerwise, 4),
        "dualpath_jct_reduction_over_layerwise_bound": round(1 - layerwise / dualpath, 4),
        # A sustained online rate is bound by the same limits (the agents' later turns are the
        # offline ones); a probe's finite window lets a rate somewhat above them pass.
        "online_ratio_bound": round(dualpath / baseline, 4),
    }


# The must-show keys whose modelled limit `bounds` states, by the bound's key.
BOUND_OF = {
    "offline_throughput_ratio": "offline_ratio_bound",
    "split_throughput_ratio": "offline_ratio_bound",
    "layerwise_jct_reduction": "layerwise_jct_reduction_bound",
    "dualpath_jct_reduction_over_layerwise": "dualpath_jct_reduction_over_layerwise_bound",
    "online_capacity_ratio": "online_ratio_bound",
}


def limits(verdicts: dict[str, dict[str, Any]], modelled: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each ratio beside the limit the cost model puts on it: whether its target is within it."""
    out = {}
    for key, bound_key in BOUND_OF.items():
        bound, target = modelled[bound_key], verdicts[key]["target_value"]
        out[key] = {
            "value": verdicts[key]["value"],
            "target": verdicts[key]["target"],
            "modelled_bound": bound,
            "target_within_bound": None if target is None else bound >= target,
        }
    return out


def run_dualpath(spec: DualPathSimSpec, progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    started_unix = time.time()
    workload = generate(spec.workload)
    offline: dict[str, Any] = {}
    policies_json: dict[str, Any] = {}
    capacity: dict[str, Any] = {}
    for name in spec.policies:
        policy = resolve(name, spec.turn_order)
        result = simulate(spec.config, policy, workload, None, spec.tool_wait_s, spec.workload.seed)
        offline[name] = figures(result)
        policies_json[name] = {
            "settings": policy.to_dict(),
            "offline": offline[name],
            "wall_s": round(result.wall_s, 3),
        }
        if progress:
            _log(f"{name} offline: JCT {result.duration_s:.1f} s ({result.events} events, {result.wall_s:.1f} s wall)")
        if spec.online and name in spec.online_policies:
            capacity[name] = online_capacity(spec, policy)
            policies_json[name]["capacity"] = capacity[name]
            if progress:
                _log(f"{name} online: {capacity[name]['capacity_agents_per_s']} agents/s")
    rates = {n: c.get("capacity_agents_per_s") for n, c in capacity.items()}
    probes = {n: c.get("probes") or [] for n, c in capacity.items()}
    must = ratios.must_show(offline, rates, probes)
    verdicts = ratios.verdicts(must)
    modelled = bounds(spec)
    profile = load_profile(spec.profile)
    config = spec.config
    online_workload = late_turns(spec.workload, 1, spec.online_turns)
    return {
        **must,
        "targets": verdicts,
        "limits": limits(verdicts, modelled),
        "tpot_at_equal_load": ratios.equal_load_tpot(probes),
        "bounds": modelled,
        "storage_regime": {
            "modelled": regime.modelled(
                workload,
                config.cost(),
                profile,
                config.engines("prefill"),
                config.engines("decode"),
                config.block_size,
                True,
            )
        },
        "regime": {
            "simulator": "agentserve sim (virtual time; docs/sim.md)",
            "profile": spec.profile,
            "cluster": config.to_dict(),
            "workload": spec.workload.to_dict(),
            "workload_shape": shape(workload).to_dict(),
            "tool_wait_mean_s": spec.tool_wait_s,
            "turn_order": spec.turn_order,
            "online": None
            if not spec.online
            else {
                "slo": spec.slo,
                "duration_s": spec.online_duration_s,
                "turns_per_agent": spec.online_turns,
                "start_agents_per_s": spec.online_start,
                "tolerance": spec.online_tolerance,
                "search": "capacity.search: doubling from the start until a probe fails, then bisection",
                "workload_shape": shape(generate(online_workload)).to_dict(),
            },
            "search_spec": asdict(spec.search_spec()),
        },
        "policies": policies_json,
        "wall_s": round(time.monotonic() - started, 3),
        "wall_clock": {"start_unix": started_unix, "end_unix": time.time()},
    }


def _log(text: str) -> None:
    import sys

    print(f"sim dualpath: {text}", file=sys.stderr, flush=True)
