"""EngineConfig: how an engine lays out and schedules KV, validated once at construction."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from agentserve.common.config import check_choice, choices_of
from agentserve.contracts.agents import CRITICAL_PRIORITY
from agentserve.costmodel.models import KVDtype
from agentserve.engine.config import parse_dtype
from agentserve.engine.device import resolve_device
from agentserve.engine.emulation_config import ComputeMode, EmulationConfig
from agentserve.engine.prefill_batch import PrefillBatchPolicy, make_prefill_batch_policy
from agentserve.engine.speculative.config import SpeculativeConfig
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, check_eviction_policy

# How an engine holds and ships KV (`KVDtype`). auto: in the model's dtype. fp8_e4m3: every K/V row
# it writes is rounded to e4m3 with the row's own power-of-two scale (`kv.fp8`), so prefill, decode,
# the prefix cache and every imported block attend over the same FP8 values, and blocks leave it as
# FP8 bytes plus scales (the block format's `fp8_e4m3`): half of bf16's bytes to the store and NICs.
# An emulated engine charges the target's FP8 bytes (`TargetModel.with_kv_dtype`).
KV_DTYPES = choices_of(KVDtype)

# The estimated deviation (`engine.recompute_selection`) above which a segmented request is
# recomputed in full, read from the quality curve (bench/papers/tokendance/quality.py): with masters from
# the round's first prompt, the default fraction left 0.11 on average and 0.13 at the 90th
# percentile, so 0.2 catches only outliers.
DEFAULT_MAX_DEVIATION = 0.2


@dataclass(frozen=True)
class EngineConfig:
    block_size: int = 16
    kv_cache_bytes: int = 256 << 20  # real compute only: emulated pools are sized from the target GPU
    dtype: str = "fp32"
    prefix_cache: bool = True
    max_batch_size: int = 64
    num_threads: int = 0  # 0 = torch's default
    eviction_policy: str = DEFAULT_EVICTION_POLICY  # which cached KV slots are reused first (`kv.eviction`)
    # A prefill-only request (max_tokens 1) whose cached prefix arrives from outside the pool runs
    # layer by layer: its external blocks never take pool slots, only one layer of them is staged
    # at a time (`LLMEngine` docstring). Off: external blocks are written into the pool first.
    layerwise: bool = False
    prefill_batching: str = "fcfs"  # which waiting prefills a step takes (`engine.prefill_batch`)
    prefill_token_budget: int = 8192  # compute-quota: a batch's cost limit, in new-token equivalents
    prefill_attention_tokens: int = 0  # compute-quota: cached tokens whose attention costs one new token
    # A share of the pool held for sequences at or above `critical_priority` (critical-path agents,
    # see `LLMEngine.critical_reserve`): at most this fraction, sized by their demand. 0 = none.
    critical_reserve: float = 0.0
    critical_priority: int = CRITICAL_PRIORITY
    # A sequence's logits are bit-identical whatever it is batched with (`engine.attention`), so
    # greedy output matches a recompute however requests interleave. Off: decode attention and
    # linears take their fastest kernels, whose low bits depend on the batch.
    batch_invariant: bool = True
    compute: ComputeMode = "real"
    # A segmented (TokenDance) request whose estimated deviation from a full recompute passes this
    # is recomputed in full (`engine.recompute_selection`); None: never.
    reuse_max_deviation: float | None = DEFAULT_MAX_DEVIATION
    emulation: EmulationConfig = field(default_factory=EmulationConfig)  # read when compute is emulated
    kv_dtype: KVDtype = "auto"
    # Speculative decoding (`engine.speculative`): drafts verified in one forward per step; off by default.
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    # Where the weights, the KV pool and each forward's tensors live (`engine.device`): auto, cpu,
    # cuda or cuda:N. Read when compute is real; an emulated engine runs no model.
    device: str = "cpu"
    # A MoE model's expert replicas over expert-parallel ranks (`engine.expert_placement`, a JSON
    # file): each replicated expert's routed tokens are split over its replicas and counted per
    # rank (`ExpertLoad.rank_counts`); with batch_invariant outputs are unchanged to the bit. "" = no
    # placement. Real compute only.
    expert_placement: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise ValueError(f"block_size must be a positive integer, got {self.block_size!r}")
        if self.kv_cache_bytes <= 0:
            raise ValueError(f"kv_cache_bytes must be positive, got {self.kv_cache_bytes}")
        if self.max_batch_size <= 0:
            raise ValueError(f"max_batch_size must be positive, got {self.max_batch_size}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {self.num_threads}")
        if not isinstance(self.layerwise, bool):
            raise ValueError(f"layerwise must be true or false, got {self.layerwise!r}")
        if not 0 <= self.critical_reserve < 1:
            raise ValueError(f"critical_reserve must be a fraction of the pool in [0, 1), got {self.critical_reserve}")
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(f"batch_invariant must be true or false, got {self.batch_invariant!r}")
        self.prefill_batch_policy()  # ValueError naming the bad field
        check_choice("compute", self.compute, ComputeMode)
        check_choice("kv_dtype", self.kv_dtype, KVDtype)
        if self.reuse_max_deviation is not None and not self.reuse_max_deviation >= 0:
            raise ValueError(f"reuse_max_deviation must be >= 0, got {self.reuse_max_deviation!r}")
        parse_dtype(self.dtype)
        resolve_device(self.device)  # ValueError naming --device, at start-up
        if self.speculative.enabled and self.compute != "real":
            raise ValueError(f"speculative decoding needs real compute, got compute {self.compute!r}")
        check_eviction_policy(self.eviction_policy)
        if self.expert_placement and self.compute != "real":
            raise ValueError(
                f"expert_placement needs real compute (a MoE model's router), got compute {self.compute!r}"
            )

    @property
    def torch_device(self) -> torch.device:
        """The device `device` names on this machine (`auto` resolved)."""
        return resolve_device(self.device)

    @property
    def fp8_kv(self) -> bool:
        return self.kv_dtype == "fp8_e4m3"

    @property
    def block_kv_dtype(self) -> str:
        """The block format's `kv_dtype` this engine's exported blocks carry."""
        return "fp8_e4m3" if self.fp8_kv else "native"

    def prefill_batch_policy(self) -> PrefillBatchPolicy:
        return make_prefill_batch_policy(
            self.prefill_batching, self.prefill_token_budget, self.prefill_attention_tokens
        )
