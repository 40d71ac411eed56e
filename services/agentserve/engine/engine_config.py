"""EngineConfig: how an engine lays out and schedules KV, validated once at construction."""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.engine.config import parse_dtype
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, check_eviction_policy

KV_DTYPES = ("native", "fp8_e4m3")


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    kv_cache_bytes: int = 256 << 20
    dtype: str = "fp32"
    prefix_cache: bool = True
    max_batch_size: int = 64
    num_threads: int = 0  # 0 = torch's default
    eviction_policy: str = DEFAULT_EVICTION_POLICY  # which cached KV slots are reused first (`kv.eviction`)

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
        if self.kv_cache_bytes <= 0:
            raise ValueError(f"kv_cache_bytes must be positive, got {self.kv_cache_bytes}")
        if self.max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be positive, got {self.max_batch_size}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {self.num_threads}")
        parse_dtype(self.dtype)
        check_eviction_policy(self.eviction_policy)
