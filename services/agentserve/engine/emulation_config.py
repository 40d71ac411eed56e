"""EmulationConfig: what an emulated-compute engine pretends to be (`EngineConfig.compute = "emulated"`).

An emulated engine runs no model: each forward pass sleeps the time the target model takes on the
target GPU (agentserve.costmodel.timing) times `time_dilation`, and its KV pool holds as many
blocks as the target GPU's memory leaves (agentserve.costmodel.kv_capacity), or `kv_blocks`. Its KV blocks are
real block-format buffers of a stand-in geometry (`target layers x block_size x 1 head x head_dim`,
fp16) whose payload is at most `kv_materialise_bytes` per block; the NICs charge each block the
target's bytes (agentserve.engine.emulated_pool). Torch-free, validated once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentserve.common.config import choices_of
from agentserve.costmodel.gpus import target_gpu
from agentserve.costmodel.kv_capacity import DEFAULT_ACTIVATION_RESERVE, kv_capacity_blocks
from agentserve.costmodel.models import KVDtype, target_model
from agentserve.costmodel.timing import DEFAULT_DECODE_BANDWIDTH_EFFICIENCY, DEFAULT_PREFILL_MFU, ComputeCost

# real: the model's forward runs (token-exact); emulated: forwards take the target's time from a
# cost model and KV is a stand-in of the target's size (`EmulationConfig`).
ComputeMode = Literal["real", "emulated"]
COMPUTE_MODES = choices_of(ComputeMode)

# Local seconds per target second. A DeepSeek-V3.2 decode step is ~10 ms on an H800; an engine's
# Python around it (scheduling, sampling, streaming) costs ~1-3 ms of CPU, so at D = 10 a dozen
# engines sharing two cores spend most of their time asleep in the cost model, not on the CPU.
DEFAULT_TIME_DILATION = 10.0
# Payload bytes materialised per block: a block-format buffer of ~10 KB (header included) instead
# of the target's 769 KB (DeepSeek-V3.2, 16 tokens); 0 materialises the target's full bytes.
DEFAULT_KV_MATERIALISE_BYTES = 8192


@dataclass(frozen=True)
class EmulationConfig:
    target_model: str = "deepseek-v3.2"  # agentserve.costmodel.models
    target_gpu: str = "h800"  # agentserve.costmodel.gpus
    prefill_mfu: float = DEFAULT_PREFILL_MFU  # share of the GPU's dense peak a prefill reaches
    decode_bandwidth_efficiency: float = DEFAULT_DECODE_BANDWIDTH_EFFICIENCY  # share of HBM bandwidth
    weight_shards: int = 0  # GPUs a replica's weights are spread over; 0 = the model's reference deployment
    activation_reserve: float = DEFAULT_ACTIVATION_RESERVE  # share of HBM kept from the KV pool
    time_dilation: float = DEFAULT_TIME_DILATION  # local seconds per target second
    kv_materialise_bytes: int = DEFAULT_KV_MATERIALISE_BYTES  # payload per block; 0 = the target's full bytes
    max_context: int = 0  # tokens; 0 = the target model's
    # KV pool blocks of this engine; 0 = what the target GPU's HBM leaves (`kv_capacity_blocks`). A
    # smaller pool stands for the HBM share one engine has per agent at a larger scale than is run.
    kv_blocks: int = 0

    def __post_init__(self) -> None:
        target_model(self.target_model)  # ValueErrors name the choices
        target_gpu(self.target_gpu)
        if not self.time_dilation > 0:
            raise ValueError(
                f"time_dilation must be positive (local seconds per target second), got {self.time_dilation}"
            )
        if self.kv_materialise_bytes < 0:
            raise ValueError(
                f"kv_materialise_bytes must be >= 0 (0 = the target's full bytes), got {self.kv_materialise_bytes}"
            )
        if self.max_context < 0:
            raise ValueError(f"max_context must be >= 0 (0 = the target model's), got {self.max_context}")
        if self.kv_blocks < 0:
            raise ValueError(f"kv_blocks must be >= 0 (0 = what the target GPU holds), got {self.kv_blocks}")
        self.cost()  # efficiencies and weight_shards, checked where they are defined

    def cost(self, kv_dtype: KVDtype = "auto") -> ComputeCost:
        """The target's costs with its KV held as `kv_dtype` (the engine's, `EngineConfig.kv_dtype`):
        FP8 KV is charged FP8 bytes in the pool, on decode reads and on the NICs."""
        return ComputeCost(
            target_model(self.target_model).with_kv_dtype(kv_dtype),
            target_gpu(self.target_gpu),
            prefill_mfu=self.prefill_mfu,
            decode_bandwidth_efficiency=self.decode_bandwidth_efficiency,
            weight_shards=self.weight_shards,
        )

    def pool_blocks(self, block_size: int, kv_dtype: KVDtype = "auto") -> int:
        """The KV pool's blocks of `block_size` tokens: `kv_blocks`, or what the target GPU holds;
        ValueError if `kv_blocks` is more than the target GPU holds."""
        capacity = kv_capacity_blocks(self.cost(kv_dtype), block_size, self.activation_reserve)
        if self.kv_blocks > capacity:
            raise ValueError(
                f"kv_blocks {self.kv_blocks} is more than {self.target_gpu} holds for {self.target_model} "
                f"({capacity} blocks of {block_size} tokens after weights and a {self.activation_reserve:.0%} reserve)"
            )
        return self.kv_blocks or capacity

    @property
    def context_limit(self) -> int:
        return self.max_context or target_model(self.target_model).max_context
