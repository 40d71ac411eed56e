"""Expert parallelism: one MoE layer's time when its experts are spread over N GPUs (ranks).

Every rank holds `slots_per_rank` expert replicas (physical experts) and the attention of its own
share of the batch (data-parallel attention, as DeepSeek-V3 serves). A MoE layer then runs in
three phases, each as slow as its slowest rank:

    dispatch  each token copy (a token times each of its top-k experts) travels to the rank that
              holds the replica serving it; a rank receives its load's copies from every rank,
              those from other nodes over its compute NIC, those from its own node over NVLink
    experts   a rank computes its copies through its replicas' SwiGLU: the larger of
              2 * 3 * hidden * expert_intermediate FLOPs per copy at `mfu` of the GPU's peak, and
              its replicas' weight bytes at `hbm_efficiency` of HBM bandwidth
    combine   the outputs travel back the same way, in the combine dtype

    layer time = max_r dispatch_r + max_r experts_r + max_r combine_r

A rank's load is what the routing sent it (`rank_loads`: a replicated expert's tokens split evenly
over its replicas), so an imbalanced routing costs twice: the hot rank computes longer and
receives more bytes. The shared expert and attention run on each rank for its own tokens, in the
non-MoE part of the step (`moe_free_decode_s`). Not modelled: overlapping the phases with a second
micro-batch (DeepSeek's dual micro-batch overlap hides part of the all-to-all) and DeepEP's
node-level deduplication of a token bound for several experts on one node (each copy travels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentserve.costmodel.gpus import TargetGPU
from agentserve.costmodel.models import TargetModel
from agentserve.costmodel.timing import DEFAULT_DECODE_BANDWIDTH_EFFICIENCY


@dataclass(frozen=True)
class MoeLayerShape:
    """One MoE layer of a target model."""

    routed_experts: int
    top_k: int
    hidden: int
    expert_intermediate: int
    moe_layers: int
    expert_groups: int  # the router's expert groups (DeepSeek-V3 n_group); EPLB packs them to nodes
    weight_bytes_per_param: float = 1.0  # FP8 expert weights
    dispatch_bytes_per_copy: float = 0.0  # one token copy sent to an expert
    combine_bytes_per_copy: float = 0.0  # one expert output sent back

    def __post_init__(self) -> None:
        for name in ("routed_experts", "top_k", "hidden", "expert_intermediate", "moe_layers", "expert_groups"):
            if getattr(self, name) <= 0:
                raise ValueError(f"moe layer {name} must be positive, got {getattr(self, name)}")
        if self.routed_experts % self.expert_groups:
            raise ValueError(f"routed_experts ({self.routed_experts}) must divide into expert_groups")

    @property
    def expert_weight_bytes(self) -> float:
        return 3 * self.hidden * self.expert_intermediate * self.weight_bytes_per_param

    @property
    def expert_flops_per_copy(self) -> float:
        return 2 * 3 * self.hidden * self.expert_intermediate


# deepseek-ai/DeepSeek-V3 config.json: 256 routed experts of width 2048 in 8 groups, top-8, hidden
# 7168, 58 MoE layers (the first 3 of 61 are dense). Dispatch in FP8 with one FP32 scale per 128
# values (7168 + 56 * 4 bytes), combine in BF16, as DeepEP's normal kernels send them.
DEEPSEEK_V3_MOE = MoeLayerShape(
    routed_experts=256,
    top_k=8,
    hidden=7168,
    expert_intermediate=2048,
    moe_layers=58,
    expert_groups=8,
    dispatch_bytes_per_copy=7168 + 56 * 4,
    combine_bytes_per_copy=2 * 7168,
)


@dataclass(frozen=True)
class MoeLayerTime:
    dispatch_s: float
    experts_s: float
    combine_s: float

    @property
    def total_s(self) -> float:
        return self.dispatch_s + self.experts_s + self.combine_s


@dataclass(frozen=True)
class ExpertParallelCost:
    shape: MoeLayerShape
    gpu: TargetGPU
    ranks: int
    gpus_per_node: int
    nic_bytes_per_s: float  # each GPU's compute NIC
    nvlink_bytes_per_s: float = 160e9  # achieved per GPU within a node (DeepEP's intranode figure on H800)
    mfu: float = 0.4
    hbm_efficiency: float = 0.7
    latency_s: float = 5e-6  # per all-to-all phase

    def __post_init__(self) -> None:
        if self.ranks <= 0 or self.gpus_per_node <= 0 or self.ranks % min(self.ranks, self.gpus_per_node):
            raise ValueError(f"ranks ({self.ranks}) must be a multiple of gpus_per_node ({self.gpus_per_node})")
        if self.nic_bytes_per_s <= 0 or self.nvlink_bytes_per_s <= 0:
            raise ValueError("nic_bytes_per_s and nvlink_bytes_per_s must be positive")
        if not 0 < self.mfu <= 1 or not 0 < self.hbm_efficiency <= 1:
            raise ValueError("mfu and hbm_efficiency must be in (0, 1]")

    def experts_s(self, copies: float, replicas: int) -> float:
        """One rank's expert compute: `copies` token copies through `replicas` resident experts."""
        compute = copies * self.shape.expert_flops_per_copy / (self.gpu.dense_flops * self.mfu)
        memory = replicas * self.shape.expert_weight_bytes / (self.gpu.hbm_bytes_per_s * self.hbm_efficiency)
        return max(compute, memory)

    def transfer_s(self, copies: float, bytes_per_copy: float) -> float:
        """One rank receiving `copies` from all ranks alike: the other nodes' share over its NIC,
        its own node's other GPUs' share over NVLink, whichever takes longer."""
        local = min(self.ranks, self.gpus_per_node)
        remote_share = (self.ranks - local) / self.ranks
        local_share = (local - 1) / self.ranks
        nic = copies * remote_share * bytes_per_copy / self.nic_bytes_per_s
        nvlink = copies * local_share * bytes_per_copy / self.nvlink_bytes_per_s
        return self.latency_s + max(nic, nvlink)

    def layer_time(self, rank_copies: Sequence[float], slots_per_rank: int) -> MoeLayerTime:
        """The layer's time given each rank's token copies (`rank_loads`)."""
        if len(rank_copies) != self.ranks:
            raise ValueError(f"{len(rank_copies)} rank loads for {self.ranks} ranks")
        peak = max(rank_copies)
        return MoeLayerTime(
            dispatch_s=self.transfer_s(peak, self.shape.dispatch_bytes_per_copy),
            experts_s=self.experts_s(peak, slots_per_rank),
            combine_s=self.transfer_s(peak, self.shape.combine_bytes_per_copy),
        )


def rank_loads(expert_copies: Sequence[float], placement: Sequence[int], ranks: int) -> list[float]:
    """Each rank's token copies: `placement[slot]` is the logical expert physical slot `slot` serves,
    slots rank-major (`len(placement) // ranks` per rank); an expert's copies split evenly over
    its replicas."""
    if len(placement) % ranks:
        raise ValueError(f"{len(placement)} slots do not divide over {ranks} ranks")
    replicas = [0] * len(expert_copies)
    for expert in placement:
        replicas[expert] += 1
    missing = [e for e, n in enumerate(replicas) if n == 0 and expert_copies[e] > 0]
    if missing:
        raise ValueError(f"experts {missing[:5]} receive tokens but have no replica")
    per_rank = len(placement) // ranks
    loads = [0.0] * ranks
    for slot, expert in enumerate(placement):
        loads[slot // per_rank] += expert_copies[expert] / replicas[expert]
    return loads


def moe_free_decode_s(model: TargetModel, gpu: TargetGPU, shape: MoeLayerShape, contexts: Sequence[int]) -> float:
    """One decode step's time outside the routed experts, for sequences of these contexts on one
    rank: its non-expert active weights (attention, dense layers, shared experts, embeddings) and
    its sequences' KV read from HBM (memory-bound at decode, `timing`'s efficiency)."""
    routed = shape.moe_layers * shape.top_k * 3 * shape.hidden * shape.expert_intermediate
    weight_bytes = (model.active_params - routed) * model.weight_bytes_per_param
    kv_bytes = sum(model.decode_kv_bytes(c) for c in contexts)
    return (weight_bytes + kv_bytes) / (gpu.hbm_bytes_per_s * DEFAULT_DECODE_BANDWIDTH_EFFICIENCY)


class ExpertParallelDecode:
    """An emulated decode engine's step time on one rank of an expert-parallel deployment (the
    `decode_cost` an `EmulatedRunner` takes): `moe_free_decode_s` of the live batch's contexts,
    plus the next entry of `moe_step_s`, each step's MoE layers at their slowest rank's time
    (`ExpertParallelCost.layer_time` summed over the layers) under a routing given in advance, a
    replay of recorded or drawn loads. Entries are taken in order, from the first again after the
    last; `restart` goes back to the first."""

    def __init__(self, model: TargetModel, gpu: TargetGPU, shape: MoeLayerShape, moe_step_s: Sequence[float]):
        if not moe_step_s:
            raise ValueError("moe_step_s needs at least one step's MoE time")
        self.model = model
        self.gpu = gpu
        self.shape = shape
        self.moe_step_s = list(moe_step_s)
        self.steps = 0

    def restart(self) -> None:
        self.steps = 0

    def decode_step_s(self, contexts: Sequence[int]) -> float:
        moe = self.moe_step_s[self.steps % len(self.moe_step_s)]
        self.steps += 1
        return moe_free_decode_s(self.model, self.gpu, self.shape, contexts) + moe
