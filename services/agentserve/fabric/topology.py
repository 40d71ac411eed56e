"""A node's NICs as DualPath's testbed has them, and the per-engine NICs they give each role.

One engine per GPU. A node has `gpus` GPUs, each with its own compute NIC (CNIC, engine <-> engine
traffic), and `storage_nics` storage NICs (SNIC, engine <-> KV store) shared by all its GPUs: the
DualPath node is 8 GPUs, 8 x 400 Gbps CNICs and one 400 Gbps SNIC, so a prefill engine's store
reads get an eighth of the SNIC when its node is busy. Nodes serve one role; P:D is the ratio of
prefill nodes to decode nodes (1:2 in the paper's main setup).

Engines run as separate processes with a token bucket each, so by default a node's SNIC is split
statically: every engine gets gbps * storage_nics / gpus, the share it has when all of its node's
engines read. With a shared SNIC (`up --local --shared-snic`, engine config `snic_group`) the
engines of a node draw from one bucket (agentserve.fabric.shared_bucket) worth their shares
together, so an engine whose neighbours are idle reads at the whole node's rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class NICSpec:
    gbps: float  # 0 = unshaped
    latency_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.gbps < 0:
            raise ValueError(f"gbps must be >= 0 (0 = unshaped), got {self.gbps}")
        if self.latency_ms < 0:
            raise ValueError(f"latency_ms must be >= 0, got {self.latency_ms}")


@dataclass(frozen=True)
class RoleNICs:
    snic: NICSpec
    cnic: NICSpec


@dataclass(frozen=True)
class NodeTopology:
    gpus: int  # engines per node
    snic: NICSpec  # each of the node's storage NICs
    cnic: NICSpec  # each GPU's compute NIC
    storage_nics: int = 1
    prefill_nodes: int = 1  # P of P:D
    decode_nodes: int = 2  # D of P:D
    gpu_tflops: float | None = None  # dense BF16 peak of one GPU, to compare NIC bytes with compute

    def __post_init__(self) -> None:
        if self.gpus <= 0 or self.storage_nics <= 0:
            raise ValueError(f"node gpus and storage_nics must be positive, got {self.gpus}, {self.storage_nics}")
        if self.prefill_nodes <= 0 or self.decode_nodes <= 0:
            raise ValueError(f"pd_ratio needs positive counts, got {self.prefill_nodes}:{self.decode_nodes}")
        if self.gpu_tflops is not None and self.gpu_tflops <= 0:
            raise ValueError(f"gpu_tflops must be positive, got {self.gpu_tflops}")

    @property
    def pd_ratio(self) -> str:
        return f"{self.prefill_nodes}:{self.decode_nodes}"

    @property
    def decode_per_prefill(self) -> float:
        return self.decode_nodes / self.prefill_nodes

    @property
    def snic_share(self) -> NICSpec:
        """One engine's part of its node's storage NICs."""
        return NICSpec(self.snic.gbps * self.storage_nics / self.gpus, self.snic.latency_ms)

    def engine_nics(self) -> RoleNICs:
        """Prefill and decode nodes are built alike: the same NICs for an engine of either role."""
        return RoleNICs(self.snic_share, self.cnic)

    def with_pd_ratio(self, ratio: str) -> NodeTopology:
        prefill, decode = parse_pd_ratio(ratio)
        return replace(self, prefill_nodes=prefill, decode_nodes=decode)

    def to_dict(self) -> dict[str, float | int | str | None]:
        return {
            "gpus_per_node": self.gpus,
            "storage_nics_per_node": self.storage_nics,
            "snic_gbps": self.snic.gbps,
            "cnic_gbps_per_gpu": self.cnic.gbps,
            "snic_gbps_per_engine": self.snic_share.gbps,
            "pd_ratio": self.pd_ratio,
            "gpu_tflops": self.gpu_tflops,
        }


def parse_pd_ratio(ratio: str) -> tuple[int, int]:
    """`"1:2"` -> (1, 2): prefill nodes to decode nodes."""
    parts = str(ratio).split(":")
    try:
        prefill, decode = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"pd_ratio must look like 1:2 (prefill nodes:decode nodes), got {ratio!r}") from None
    if prefill <= 0 or decode <= 0:
        raise ValueError(f"pd_ratio needs positive counts, got {ratio!r}")
    return prefill, decode
