"""How long the target model takes on the target GPU: the times an emulated engine sleeps.

    prefill of `new` tokens after `cached` loaded ones
        = prefill_flops(cached, new) / (dense_flops * prefill_mfu)
    decode step of a batch whose sequences have contexts c_1..c_B (each token itself included)
        = max(memory, compute), with
          memory  = (weight_bytes / weight_shards + sum_i decode_kv_bytes(c_i))
                    / (hbm_bytes_per_s * decode_bandwidth_efficiency)
          compute = 2 * active_params * B / (dense_flops * prefill_mfu)

Each layer takes 1/layers of either (every layer has the same shape). A decode step reads all of the
GPU's weight shard: at serving batch sizes an MoE layer's tokens touch nearly every local expert.
The times are target seconds; an emulated engine sleeps them times its time dilation
(agentserve.fabric.profiles: local seconds = D target seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentserve.costmodel.gpus import TargetGPU
from agentserve.costmodel.models import TargetModel

DEFAULT_PREFILL_MFU = 0.4  # MoE prefill with FP8 GEMMs and expert parallelism reaches ~40% of BF16 peak
DEFAULT_DECODE_BANDWIDTH_EFFICIENCY = 0.7  # a memory-bound decode step streams at ~70% of HBM peak


@dataclass(frozen=True)
class ComputeCost:
    model: TargetModel
    gpu: TargetGPU
    prefill_mfu: float = DEFAULT_PREFILL_MFU
    decode_bandwidth_efficiency: float = DEFAULT_DECODE_BANDWIDTH_EFFICIENCY
    weight_shards: int = 0  # GPUs a replica's weights are spread over; 0 = the model's reference deployment

    def __post_init__(self) -> None:
        if not 0 < self.prefill_mfu <= 1:
            raise ValueError(f"prefill_mfu must be in (0, 1], got {self.prefill_mfu}")
        if not 0 < self.decode_bandwidth_efficiency <= 1:
            raise ValueError(f"decode_bandwidth_efficiency must be in (0, 1], got {self.decode_bandwidth_efficiency}")
        if self.weight_shards < 0:
            raise ValueError(f"weight_shards must be >= 0 (0 = the model's), got {self.weight_shards}")

    @property
    def shards(self) -> int:
        return self.weight_shards or self.model.weight_shards

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.model.weight_bytes / self.shards

    @property
    def _flops_per_s(self) -> float:
        return self.gpu.dense_flops * self.prefill_mfu

    def prefill_s(self, cached_tokens: int, new_tokens: int) -> float:
        return self.model.prefill_flops(cached_tokens, new_tokens) / self._flops_per_s

    def decode_step_s(self, contexts: Sequence[int]) -> float:
        kv = sum(self.model.decode_kv_bytes(c) for c in contexts)
        memory = (self.weight_bytes_per_gpu + kv) / (self.gpu.hbm_bytes_per_s * self.decode_bandwidth_efficiency)
        compute = 2 * self.model.active_params * len(contexts) / self._flops_per_s
        return max(memory, compute)
