"""SimConfig: the simulated cluster, built once from a hardware profile and checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentserve.common.config import check_choice
from agentserve.costmodel.gpus import target_gpu
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.costmodel.models import KVDtype, TargetModel, target_model
from agentserve.costmodel.timing import DEFAULT_DECODE_BANDWIDTH_EFFICIENCY, DEFAULT_PREFILL_MFU, ComputeCost
from agentserve.fabric.profiles import HardwareProfile

# Layerwise loads and computes move in this many layer groups (events), not per layer: the
# overlap of group g+1's load with group g's compute is kept, at 1/groups of the events per turn.
DEFAULT_LAYER_GROUPS = 8
DEFAULT_BLOCK_SIZE = 256  # tokens per KV block, as `bench dualpath`


@dataclass(frozen=True)
class SimConfig:
    model: str = "deepseek-v3.2"
    gpu: str = "h800"
    prefill_nodes: int = 1
    decode_nodes: int = 2
    gpus_per_node: int = 8
    snic_gbps: float = 400.0  # one node's storage NICs together, shared by its GPUs
    cnic_gbps: float = 400.0  # each GPU's compute NIC
    block_size: int = DEFAULT_BLOCK_SIZE
    layer_groups: int = DEFAULT_LAYER_GROUPS
    prefill_mfu: float = DEFAULT_PREFILL_MFU
    decode_bandwidth_efficiency: float = DEFAULT_DECODE_BANDWIDTH_EFFICIENCY
    activation_reserve: float = 0.1
    # Engines of a role when not whole nodes (0: nodes x gpus_per_node). Engines fill nodes in order;
    # a node with fewer engines has their static shares of the storage NIC (the emulated cluster's
    # shared SNIC bucket, `cluster/settings.py`).
    prefill_engines: int = 0
    decode_engines: int = 0
    # KV pool blocks per engine (0: what the GPU's HBM holds after the weights, `kv_capacity`).
    prefill_pool_blocks: int = 0
    decode_pool_blocks: int = 0
    kv_dtype: KVDtype = "auto"  # fp8_e4m3: the store, the NICs and the pools carry FP8 KV bytes

    def __post_init__(self) -> None:
        target_model(self.model)
        check_choice("sim kv_dtype", self.kv_dtype, KVDtype)
        target_gpu(self.gpu)
        for name in ("prefill_nodes", "decode_nodes", "gpus_per_node", "block_size", "layer_groups"):
            if getattr(self, name) < 1:
                raise ValueError(f"sim {name} must be >= 1, got {getattr(self, name)}")
        if not (self.snic_gbps > 0 and self.cnic_gbps > 0):
            raise ValueError(f"sim snic_gbps and cnic_gbps must be positive, got {self.snic_gbps}, {self.cnic_gbps}")
        for name in ("prefill_engines", "decode_engines", "prefill_pool_blocks", "decode_pool_blocks"):
            if getattr(self, name) < 0:
                raise ValueError(f"sim {name} must be >= 0 (0 = the default), got {getattr(self, name)}")
        self.cost()  # the cost model's own checks (mfu, efficiency) here, not mid-run

    @classmethod
    def from_profile(cls, profile: HardwareProfile, **overrides: Any) -> SimConfig:
        """The profile's node (GPUs, NICs, P:D) and target model, with `overrides` on top."""
        if profile.node is None:
            raise ValueError(f"profile {profile.name} has no node topology; the simulator needs one")
        node = profile.node
        base: dict[str, Any] = {
            "prefill_nodes": node.prefill_nodes,
            "decode_nodes": node.decode_nodes,
            "gpus_per_node": node.gpus,
            "snic_gbps": node.snic.gbps * node.storage_nics,
            "cnic_gbps": node.cnic.gbps,
        }
        if profile.target is not None:
            base["model"] = profile.target.model
        return cls(**{**base, **overrides})

    def target(self) -> TargetModel:
        """The target model with its KV in `kv_dtype`."""
        return target_model(self.model).with_kv_dtype(self.kv_dtype)

    def cost(self) -> ComputeCost:
        return ComputeCost(self.target(), target_gpu(self.gpu), self.prefill_mfu, self.decode_bandwidth_efficiency)

    def engines(self, role: str) -> int:
        """Engines of `role` (prefill or decode)."""
        if role == "prefill":
            return self.prefill_engines or self.prefill_nodes * self.gpus_per_node
        return self.decode_engines or self.decode_nodes * self.gpus_per_node

    def pool_blocks(self, role: str) -> int:
        """KV blocks of one engine of `role`."""
        fixed = self.prefill_pool_blocks if role == "prefill" else self.decode_pool_blocks
        return fixed or kv_capacity_blocks(self.cost(), self.block_size, self.activation_reserve)

    @property
    def snic_share_bytes_per_s(self) -> float:
        """One engine's static share of its node's storage NIC, bytes/s."""
        return self.snic_gbps * 1e9 / 8 / self.gpus_per_node

    @property
    def kv_bytes_per_token(self) -> int:
        return self.target().kv_bytes_per_token

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "kv_dtype": self.kv_dtype,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "gpu": self.gpu,
            "engines": {"prefill": self.engines("prefill"), "decode": self.engines("decode")},
            "gpus_per_node": self.gpus_per_node,
            "pool_blocks": {"prefill": self.pool_blocks("prefill"), "decode": self.pool_blocks("decode")},
            "snic_gbps_per_node": self.snic_gbps,
            "cnic_gbps_per_gpu": self.cnic_gbps,
            "block_size": self.block_size,
            "layer_groups": self.layer_groups,
            "prefill_mfu": self.prefill_mfu,
            "decode_bandwidth_efficiency": self.decode_bandwidth_efficiency,
            "activation_reserve": self.activation_reserve,
        }
