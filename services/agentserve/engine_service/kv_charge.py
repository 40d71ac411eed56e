"""KVCharge: the bytes an engine's NICs are charged for the KV they move.

Real compute: the bytes on the wire, headers included (every call below returns what it is given).
Emulated compute (agentserve.engine.emulation_config): a block is materialised smaller than the
target's, so a NIC is charged the target's bytes for the KV a buffer carries, whatever its size
here: `declared_block_bytes` a whole block, 1/num_layers of that per layer, and a relayed run's
chunk its share of the run's payload. Headers are free: on the target they are a rounding error,
while a stand-in block's header is a quarter of it and a layer-by-layer read repeats it per layer.
Both ends of a transfer compute the same charge from the same bytes, so their NICs agree.
"""

from __future__ import annotations

from collections.abc import Callable

from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.engine import LLMEngine
from agentserve.kv.block_header import read_header

# (run header on a run's first chunk else b"", payload bytes in the chunk) -> bytes charged
RunPacer = Callable[[bytes | memoryview, int], int]


class KVCharge:
    def __init__(self, wire_block_bytes: int, num_layers: int, declared_block_bytes: int | None = None) -> None:
        if declared_block_bytes is not None and declared_block_bytes % num_layers:
            raise ValueError(f"declared block bytes {declared_block_bytes} must split evenly over {num_layers} layers")
        self.wire_block_bytes = wire_block_bytes
        self.num_layers = num_layers
        self.declared_block_bytes = declared_block_bytes

    @classmethod
    def for_engine(cls, engine: LLMEngine, wire_block_bytes: int) -> KVCharge:
        model = engine.model
        declared = model.geometry.declared_block_bytes if isinstance(model, EmulatedModel) else None
        return cls(wire_block_bytes, engine.model_config.num_hidden_layers, declared)

    @property
    def per_block(self) -> int:
        """A whole block's charge: what a transfer of n blocks declares up front is n times this."""
        return self.wire_block_bytes if self.declared_block_bytes is None else self.declared_block_bytes

    def blocks(self, wire_bytes: int, count: int = 1, layers: int | None = None) -> int:
        """A buffer of `wire_bytes` carrying `count` blocks, `layers` layers of each (default all)."""
        if self.declared_block_bytes is None:
            return wire_bytes
        return count * (self.declared_block_bytes // self.num_layers) * (self.num_layers if layers is None else layers)

    def run_pacer(self) -> RunPacer:
        """The charge of each chunk of a stream of block runs (`fabric.chunks.split_run`), in order."""
        if self.declared_block_bytes is None:
            return lambda run_header, payload: len(run_header) + payload
        declared = self.declared_block_bytes
        per_payload_byte = 0.0

        def charge(run_header: bytes | memoryview, payload: int) -> int:
            nonlocal per_payload_byte
            if run_header:
                header = read_header(run_header)
                last = header.layers[-1]
                per_payload_byte = header.num_blocks * declared / (last.offset + last.length)
            return round(payload * per_payload_byte)

        return charge
