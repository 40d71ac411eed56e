"""One local cluster per policy: `agentserve up --local`'s processes (kvstore, scheduler, N prefill
and M decode engines, tool proxy) on free ports, each service with the policy's settings as flags
and its own Prometheus `/metrics` (the bench reads NIC utilisation from them)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER, Policy, effective, flags
from agentserve.bench.common.target import MeteredCluster, Target
from agentserve.cluster.settings import ComputeSettings, FabricSettings
from agentserve.common.config import check_choice
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER, LoadOrder, check_load_order
from agentserve.scheduler.turn_order import TurnOrderName


@dataclass(frozen=True)
class ClusterSpec:
    """What every policy's cluster shares: engines, profile, KV block size, compute."""

    prefill: int = 2
    decoders: int = 4
    profile: str = "dualpath-h800"
    block_size: int = 256  # tokens per KV block: fewer, larger blocks keep Python's per-block work small
    tail_blocks: bool = True  # the scheduler's: a context's partial last block is stored and reused
    turn_order: TurnOrderName = DEFAULT_TURN_ORDER  # the scheduler's, every policy's (common.policy.DEFAULT_TURN_ORDER)
    local_prefill_tokens_per_s: float = 0.0  # what the profile scales against; 0 = each engine measures
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # every engine's
    # Emulated engines' KV pools in blocks, per role; 0 = what the target GPU holds (`EmulationConfig.kv_blocks`).
    prefill_kv_blocks: int = 0
    decode_kv_blocks: int = 0
    load_order: LoadOrder = DEFAULT_LOAD_ORDER  # the prefill engines' (`prefill.load_lanes`)

    def __post_init__(self) -> None:
        if self.prefill < 1 or self.decoders < 1:
            raise ValueError(f"need >= 1 prefill and decode engine, got {self.prefill} and {self.decoders}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        check_choice("turn_order", self.turn_order, TurnOrderName)
        check_load_order(self.load_order)
        if self.local_prefill_tokens_per_s < 0:
            raise ValueError(f"local_prefill_tokens_per_s must be >= 0, got {self.local_prefill_tokens_per_s}")
        self.emulation("prefill")  # a pool the target cannot hold fails here, naming kv_blocks
        self.emulation("decode")

    def emulation(self, role: str) -> EmulationConfig:
        """What `role`'s engines emulate: the compute's target with the role's pool."""
        blocks = self.prefill_kv_blocks if role == "prefill" else self.decode_kv_blocks
        emulation = replace(self.compute.emulation, kv_blocks=blocks)
        if self.compute.mode == "emulated":
            emulation.pool_blocks(self.block_size)
        return emulation

    def engine_flags(self, role: str) -> dict[str, Any]:
        """`role`'s engine settings beyond the compute's (which `LocalCluster` passes itself)."""
        settings: dict[str, Any] = {"block_size": self.block_size}
        if self.compute.mode == "emulated":
            settings["kv_blocks"] = self.emulation(role).kv_blocks
        if role == "prefill":
            settings["load_order"] = self.load_order
        return settings

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefill_engines": self.prefill,
            "decode_engines": self.decoders,
            "profile": self.profile,
            "kv_block_tokens": self.block_size,
            "tail_blocks": self.tail_blocks,
            "turn_order": self.turn_order,
            "local_prefill_tokens_per_s": self.local_prefill_tokens_per_s,
            "compute": self.compute.mode,
            "emulation": dataclasses.asdict(self.compute.emulation) if self.compute.mode == "emulated" else None,
            "prefill_kv_blocks": self.prefill_kv_blocks,
            "decode_kv_blocks": self.decode_kv_blocks,
            "load_order": self.load_order,
        }


class PolicyCluster(MeteredCluster):
    """A `MeteredCluster` whose scheduler and engines also get `policy`'s settings."""

    def __init__(self, spec: ClusterSpec, policy: Policy, root: Path | None = None) -> None:
        fabric = FabricSettings(
            spec.profile,
            str(policy.scheduler.get("kv_path_policy", FabricSettings.kv_path_policy)),
            spec.local_prefill_tokens_per_s,
        )
        super().__init__(decoders=spec.decoders, prefill=spec.prefill, fabric=fabric, root=root, compute=spec.compute)
        # kv_path_policy already reaches the scheduler through `fabric`.
        self.service_settings = {
            "scheduler": {
                **{k: v for k, v in effective(policy, "scheduler").items() if k != "kv_path_policy"},
                "tail_blocks": spec.tail_blocks,
                "turn_order": spec.turn_order,
            },
            "prefill": {**spec.engine_flags("prefill"), **effective(policy, "prefill")},
            "decode": {**spec.engine_flags("decode"), **effective(policy, "decode")},
        }

    def extra_args(self, name: str) -> list[str]:
        role = name.split("-")[0]
        return super().extra_args(name) + flags(self.service_settings.get(role, {}))


async def start(spec: ClusterSpec, policy: Policy, timeout_s: float = 300.0, bench: str = "dualpath") -> Target:
    """Start `policy`'s cluster and return it as a replay target (no span collection: tracing off
    keeps every service's CPU for serving; NIC and path bytes come from /metrics). `bench` names
    the benchmark in the progress line."""
    cluster = PolicyCluster(spec, policy)
    print(
        f"agentserve bench {bench}: starting {policy.name} ({spec.prefill} prefill, {spec.decoders} decode)...",
        file=sys.stderr,
    )
    starting = asyncio.ensure_future(asyncio.to_thread(cluster.start, timeout_s))
    try:
        await asyncio.shield(starting)
    except asyncio.CancelledError:
        # Another policy's run failed (the bench runs them at once): the start's thread runs on,
        # so wait for it and stop what it started rather than leave a cluster behind.
        with contextlib.suppress(Exception):
            await starting
        await asyncio.to_thread(cluster.stop)
        cluster.remove()
        raise
    except BaseException:
        cluster.remove()
        raise
    p = cluster.ports
    return Target(
        f"127.0.0.1:{p.scheduler}",
        f"http://127.0.0.1:{p.toolproxy_http}",
        dict(cluster.metrics),
        None,
        f"local cluster, policy {policy.name} ({spec.prefill} prefill, {spec.decoders} decode, "
        f"profile {spec.profile}; logs {cluster.log_dir})",
        cluster,
    )
