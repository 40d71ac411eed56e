"""AwareConfig: the cluster `sim agentaware` serves jobs on, checked once.

TokenCake's regime: each engine is one GPU serving a dense model whose weights leave little HBM
for KV, so the agents' contexts outgrow the pools. The default is the 27B dense model on H800s
(54 GB of BF16 weights on an 80 GB GPU: 179 blocks of 256 tokens, 45.8K tokens of KV), eight
engines on one node whose 400 Gbps storage NIC they share (the `dualpath-h800` node).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from agentserve.costmodel.gpus import target_gpu
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.costmodel.models import target_model
from agentserve.costmodel.timing import DEFAULT_DECODE_BANDWIDTH_EFFICIENCY, DEFAULT_PREFILL_MFU, ComputeCost

DEFAULT_CHUNK_TOKENS = 8192  # prompt tokens an iteration computes (vLLM's chunked-prefill budget class)


@dataclass(frozen=True)
class AwareConfig:
    model: str = "dense-27b"
    gpu: str = "h800"
    engines: int = 8
    engines_per_node: int = 8
    snic_gbps: float = 400.0  # one node's storage NICs together, shared by its engines
    block_size: int = 256
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    pool_blocks_per_engine: int = 0  # 0: what the GPU's HBM holds after the weights
    prefill_mfu: float = DEFAULT_PREFILL_MFU
    decode_bandwidth_efficiency: float = DEFAULT_DECODE_BANDWIDTH_EFFICIENCY
    activation_reserve: float = 0.1

    def __post_init__(self) -> None:
        target_model(self.model)
        target_gpu(self.gpu)
        for name in ("engines", "engines_per_node", "block_size", "chunk_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"sim agentaware {name} must be >= 1, got {getattr(self, name)}")
        if self.snic_gbps <= 0:
            raise ValueError(f"sim agentaware snic_gbps must be positive, got {self.snic_gbps}")
        if self.pool_blocks_per_engine < 0:
            raise ValueError(f"sim agentaware pool_blocks_per_engine must be >= 0, got {self.pool_blocks_per_engine}")
        self.pool_blocks()  # the cost model's checks (mfu, efficiency, HBM after weights) here, not mid-run

    def cost(self) -> ComputeCost:
        return ComputeCost(
            target_model(self.model), target_gpu(self.gpu), self.prefill_mfu, self.decode_bandwidth_efficiency
        )

    def pool_blocks(self) -> int:
        return self.pool_blocks_per_engine or kv_capacity_blocks(self.cost(), self.block_size, self.activation_reserve)

    @property
    def nodes(self) -> int:
        return -(-self.engines // self.engines_per_node)

    @property
    def snic_bytes_per_s(self) -> float:
        return self.snic_gbps * 1e9 / 8

    @property
    def block_bytes(self) -> int:
        return target_model(self.model).kv_bytes_per_token * self.block_size

    @property
    def reload_s_per_block(self) -> float:
        """One block over an engine's share of its node's storage NIC: the lifecycle's break-even."""
        return self.block_bytes / (self.snic_bytes_per_s / min(self.engines, self.engines_per_node))

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "pool_blocks_per_engine": self.pool_blocks(),
            "pool_tokens_per_engine": self.pool_blocks() * self.block_size,
            "block_bytes": self.block_bytes,
            "reload_s_per_block": round(self.reload_s_per_block, 9),
            "nodes": self.nodes,
        }
