"""The kvstore's settings, from `--flags` and `AGENTSERVE_*` env (see `common.config`)."""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.common.internal_tls import internal_tls
from agentserve.common.server import MAX_MESSAGE_BYTES
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY, check_eviction_policy

# A block must fit in one gRPC message with room for framing, or it could be stored but never read.
BLOCK_BYTES_LIMIT = MAX_MESSAGE_BYTES - (1 << 20)


@dataclass(frozen=True)
class KVStoreConfig:
    prog = "python -m agentserve.kvstore"

    host: str = "0.0.0.0"
    grpc_port: int = 50052
    metrics_port: int = 0  # 0 disables /metrics
    data_dir: str = "/tmp/agentserve-kvstore"
    fsync: bool = True  # off only for throwaway stores: an acknowledged block may then be lost
    group_commit: bool = False  # one filesystem sync for all concurrent writes instead of fsyncs per block
    max_block_bytes: int = 64 << 20
    dram_budget_bytes: int = 1 << 30  # 0 disables the DRAM tier
    ssd_budget_bytes: int = 64 << 30
    eviction_policy: str = DEFAULT_EVICTION_POLICY  # orders each tier's evictions (`kv.eviction`)
    # Scaled-out instances sharing one volume: each claims the first free `data_dir/instance-N`.
    claim_instance_dir: bool = False
    # The internal plane's mutual TLS (common/internal_tls.py): ca.pem, cert.pem, key.pem; "" = plain.
    internal_tls_dir: str = ""

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("host must not be empty")
        if not 1 <= self.grpc_port <= 65535:
            raise ValueError(f"grpc_port must be in [1, 65535], got {self.grpc_port}")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in [0, 65535] (0 disables), got {self.metrics_port}")
        if self.metrics_port == self.grpc_port:
            raise ValueError(f"metrics_port and grpc_port must differ, both are {self.grpc_port}")
        internal_tls(self.internal_tls_dir)  # unreadable credentials fail at start-up, naming the setting
        if not self.data_dir:
            raise ValueError("data_dir must not be empty")
        if not 0 < self.max_block_bytes <= BLOCK_BYTES_LIMIT:
            raise ValueError(f"max_block_bytes must be in [1, {BLOCK_BYTES_LIMIT}], got {self.max_block_bytes}")
        if self.dram_budget_bytes < 0:
            raise ValueError(f"dram_budget_bytes must be >= 0 (0 disables DRAM), got {self.dram_budget_bytes}")
        if self.ssd_budget_bytes < self.max_block_bytes:
            raise ValueError(
                f"ssd_budget_bytes must be at least max_block_bytes ({self.max_block_bytes}), "
                f"got {self.ssd_budget_bytes}"
            )
        check_eviction_policy(self.eviction_policy)
