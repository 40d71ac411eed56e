"""Target GPUs: what a cost model needs of one (HBM size and bandwidth, dense compute peak).

Figures are the vendors' datasheet peaks; the cost model applies stated efficiencies to them
(agentserve.costmodel.timing), never these peaks directly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TargetGPU:
    key: str
    description: str
    hbm_bytes: int
    hbm_bytes_per_s: float
    dense_flops: float  # dense BF16 peak, FLOP/s

    def __post_init__(self) -> None:
        if self.hbm_bytes <= 0 or self.hbm_bytes_per_s <= 0 or self.dense_flops <= 0:
            raise ValueError(f"gpu {self.key}: hbm_bytes, hbm_bytes_per_s and dense_flops must be positive")


GIB = 1 << 30

# H800 SXM: H100 SXM's compute and HBM3 (80 GB, 3.35 TB/s), NVLink cut to 400 GB/s.
H800 = TargetGPU("h800", "NVIDIA H800 SXM (80 GB HBM3, 3.35 TB/s, 989 TFLOP/s BF16 dense)", 80 * GIB, 3.35e12, 989e12)
H100 = TargetGPU("h100", "NVIDIA H100 SXM (80 GB HBM3, 3.35 TB/s, 989 TFLOP/s BF16 dense)", 80 * GIB, 3.35e12, 989e12)
H200 = TargetGPU("h200", "NVIDIA H200 SXM (141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s BF16 dense)", 141 * GIB, 4.8e12, 989e12)

# B200 SXM (DGX B200: 1,440 GB over 8 GPUs), HBM3e at 8 TB/s, 2.25 PFLOP/s dense BF16: a
# Blackwell-class GPU, 2.3x an H800's compute beside the same 400 Gbps NICs.
B200 = TargetGPU("b200", "NVIDIA B200 SXM (180 GB HBM3e, 8 TB/s, 2250 TFLOP/s BF16 dense)", 180 * GIB, 8.0e12, 2250e12)

TARGET_GPUS: dict[str, TargetGPU] = {g.key: g for g in (H800, H100, H200, B200)}


def target_gpu(key: str) -> TargetGPU:
    try:
        return TARGET_GPUS[key]
    except KeyError:
        raise ValueError(f"unknown target GPU {key!r}; choose one of {', '.join(TARGET_GPUS)}") from None
