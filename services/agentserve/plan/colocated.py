"""Colocated points: engines that prefill and decode both, under a KV lifecycle policy.

The prefill/decode simulator (`sim/cluster.py`) models one lifecycle, the store regime: every
turn's KV is persisted and the decode engine drops it at the turn's end, so nothing is left on an
engine for a lifecycle policy to keep, pin, offload or upload during a tool wait. The lifecycle
policies (`scheduler/kv_lifecycle.py`, by their registry names) act on the KV a session leaves on
the engine that served it, which `sim agentaware` models on colocated engines: each engine a GPU
with a paged pool, prefix caching, chunked prefill and continuous decode, and its share of its
node's storage NIC to the store (`sim/agentaware/`). So the lifecycle policy is a searched
dimension on colocated points only: a point is a lifecycle policy, a storage-NIC bandwidth per node
and a count of colocated engines, simulated by `AwareRun` with the workload's own sessions,
arrival times, tool calls and think times, and read by the same SLO as the prefill/decode points.

What `AwareRun` does not model of the planner's workloads: store hits a first turn takes from
another session's blocks beyond the workload's shared prefix (a Mooncake first turn's leading
blocks that an earlier conversation had), which it computes instead; the colocated figures are
pessimistic by that much.
"""

from __future__ import annotations

from agentserve.bench.common.workloads.model import Workload
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES
from agentserve.sim.agentaware.config import AwareConfig
from agentserve.sim.agentaware.policies import make_aware_policy
from agentserve.sim.agentaware.run import AwareRun
from agentserve.sim.config import SimConfig
from agentserve.sim.run import RunResult

# The prefill/decode points' lifecycle: the KV goes to the store at each turn's end.
STORE = "store"
COLOCATED = "colocated"  # the policy-set name of a colocated point (no prefill/decode policy set applies)
DEFAULT_LIFECYCLES = LIFECYCLE_POLICIES


def check_lifecycles(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` if each is a lifecycle policy's registry name; ValueError naming the choices if not."""
    for name in names:
        if name not in LIFECYCLE_POLICIES:
            raise ValueError(f"lifecycle policy must be one of {', '.join(LIFECYCLE_POLICIES)}, got {name!r}")
    return names


def aware_config(base: SimConfig, engines: int, snic_gbps: float) -> AwareConfig:
    """The colocated cluster of `engines` GPUs on the prefill/decode cluster's model, GPU, nodes and
    cost-model settings."""
    if base.kv_dtype != "auto":
        raise ValueError(f"colocated points model the target's own KV dtype only, got kv_dtype {base.kv_dtype!r}")
    return AwareConfig(
        model=base.model,
        gpu=base.gpu,
        engines=engines,
        engines_per_node=base.gpus_per_node,
        snic_gbps=snic_gbps,
        block_size=base.block_size,
        prefill_mfu=base.prefill_mfu,
        decode_bandwidth_efficiency=base.decode_bandwidth_efficiency,
        activation_reserve=base.activation_reserve,
    )


def simulate_colocated(
    base: SimConfig, lifecycle: str, engines: int, snic_gbps: float, workload: Workload, arrivals: list[float]
) -> RunResult:
    """`workload`'s sessions, arriving at `arrivals`, on `engines` colocated engines under the
    lifecycle policy `lifecycle`, as a `RunResult` (every turn's record; the engines' busy time is
    counted as prefill busy time, the engines doing both)."""
    config = aware_config(base, engines, snic_gbps)
    run = AwareRun(config, make_aware_policy(lifecycle), workload, 1.0, 0, arrivals=arrivals)
    wall_s = run.serve()
    records = list(run.records.values())
    first = min(arrivals) if arrivals else 0.0
    return RunResult(
        records=records,
        duration_s=max((r.last_token_s or r.sent_s for r in records), default=first) - first,
        snic_bytes={node: link.bytes_total for node, link in run.links.items()},
        snic_rates={node: link.bytes_per_s for node, link in run.links.items()},
        bytes_by_path={"store_loaded": sum(e.loaded_blocks for e in run.engines.values()) * config.block_bytes},
        prefill_busy_s=sum(e.busy_s for e in run.engines.values()),
        decode_busy_s=0.0,
        events=run.loop.events_run,
        wall_s=wall_s,
    )
