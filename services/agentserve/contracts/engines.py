"""What an engine says about itself: its role, load and NICs (registration and every heartbeat)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class NICStatus:
    """One emulated NIC of an engine as its last heartbeat reported it (fabric.proto NICStatus)."""

    name: str  # snic | cnic
    configured_gbps: float = 0.0  # 0 = unshaped
    queue_bytes: int = 0  # bytes of open transfers not yet let through
    active_transfers: int = 0
    bytes_total: int = 0


@dataclass(frozen=True)
class EngineStatus:
    """What an engine reports at registration and with every heartbeat (common.proto EngineStatus)."""

    engine_id: str
    role: Role
    address: str
    model_fingerprint: str
    block_size: int
    model_name: str = ""
    running: int = 0
    waiting: int = 0
    free_kv_blocks: int = 0
    total_kv_blocks: int = 0
    vocab_size: int = 0
    max_context: int = 0
    nics: tuple[NICStatus, ...] = ()
    kv_block_bytes: int = 0  # one full block in the block format; 0 = not reported
    # Prefill engines: tokens left to compute of the prefills they accepted and have not returned.
    unfinished_prefill_tokens: int = 0
    # Draining: no new turns; it finishes its own, then deregisters (scheduler/registry.py).
    draining: bool = False

    def nic(self, name: str) -> NICStatus:
        """The named NIC's last report (an idle one if the engine reports none by that name)."""
        for nic in self.nics:  # a loop, not next(..., default): the default is built only when needed
            if nic.name == name:
                return nic
        return NICStatus(name)

    def __post_init__(self) -> None:
        if not self.engine_id:
            raise ValueError("engine_id must not be empty")
        if not isinstance(self.role, Role):
            raise ValueError(f"engine role must be prefill or decode, got {self.role!r}")
        if ":" not in self.address:
            raise ValueError(f"engine address must be host:port, got {self.address!r}")
        if not self.model_fingerprint:
            raise ValueError("model_fingerprint must not be empty")
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.vocab_size <= 0 or self.max_context <= 0:
            raise ValueError(f"vocab_size and max_context must be positive, got {self.vocab_size}, {self.max_context}")
