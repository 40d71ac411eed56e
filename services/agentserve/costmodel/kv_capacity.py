"""The KV blocks one target GPU holds: its HBM less its weight shard and an activation reserve.

    blocks = floor((hbm_bytes - weight_bytes / weight_shards - activation_reserve * hbm_bytes)
                   / (kv_bytes_per_token * block_size))

The reserve is the fraction of HBM kept for activations, CUDA graphs and the allocator's slack
(vLLM's default gpu_memory_utilization of 0.9 keeps 10%).
"""

from __future__ import annotations

from agentserve.costmodel.timing import ComputeCost

DEFAULT_ACTIVATION_RESERVE = 0.1


def kv_capacity_blocks(
    cost: ComputeCost, block_size: int, activation_reserve: float = DEFAULT_ACTIVATION_RESERVE
) -> int:
    """Blocks of `block_size` tokens of the target model's KV that fit on one target GPU."""
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if not 0 <= activation_reserve < 1:
        raise ValueError(f"activation_reserve must be in [0, 1), got {activation_reserve}")
    hbm = cost.gpu.hbm_bytes
    free = hbm - cost.weight_bytes_per_gpu - activation_reserve * hbm
    per_block = cost.model.kv_bytes_per_token * block_size
    if free < per_block:
        raise ValueError(
            f"{cost.model.key} on {cost.gpu.key}: {cost.weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU "
            f"(over {cost.shards} GPUs) and a {activation_reserve:.0%} reserve leave no room for one KV block of "
            f"{per_block} B; spread the weights over more GPUs (weight_shards)"
        )
    return int(free // per_block)
