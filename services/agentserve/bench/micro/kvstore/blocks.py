"""Synthetic KV blocks for the kvstore benchmarks and tests: the real block format (header,
layer-major payload, per-layer CRC32s), random payload bytes, no model and no tensor work, so a
block of any size costs little more than copying its bytes."""

from __future__ import annotations

import hashlib
import random

import torch

from agentserve.common.checksum import crc32
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kv.block_header import LayerExtent, encode_header, layer_layout

_POOL_BYTES = 16 << 20


class BlockMaker:
    """Makes distinct valid blocks of about `size_bytes` with `num_layers` layers.

    Payloads are windows of one random pool at offsets hashed from the id, so two blocks almost
    never share contents while making one costs a copy, not a random generator run.
    """

    def __init__(self, fingerprint: str, size_bytes: int, num_layers: int = 32, seed: int = 0) -> None:
        if size_bytes < num_layers * 4:
            raise ValueError(f"size_bytes must be at least 4 per layer, got {size_bytes} for {num_layers} layers")
        self.fingerprint = fingerprint
        self.num_layers = num_layers
        self._rng = random.Random(seed)
        self._head_dim = max(1, size_bytes // (num_layers * 2 * 2))  # float16 K and V per layer
        layout = layer_layout(torch.float16, "native", 1, 1, 1, self._head_dim)
        self._stride, self._length = layout.stride, layout.length
        self.payload_bytes = (num_layers - 1) * layout.stride + layout.length
        self._pool = self._rng.randbytes(max(_POOL_BYTES, 2 * self.payload_bytes))

    def make(self, block_id: bytes) -> bytes:
        """The block of `block_id`: the same bytes every time for one id (and maker)."""
        digest = hashlib.blake2b(bytes(block_id), digest_size=8).digest()
        offset = int.from_bytes(digest, "little") % (len(self._pool) - self.payload_bytes)
        payload = memoryview(self._pool)[offset : offset + self.payload_bytes]
        extents = [
            LayerExtent(
                i * self._stride, self._length, crc32(payload[i * self._stride : i * self._stride + self._length])
            )
            for i in range(self.num_layers)
        ]
        fields = {
            "fingerprint": self.fingerprint,
            "dtype": "float16",
            "kv_dtype": "native",
            "num_layers": self.num_layers,
            "num_blocks": 1,
            "block_size": 1,
            "num_kv_heads": 1,
            "head_dim": self._head_dim,
            "block_ids": [bytes(block_id).hex()],
        }
        return encode_header(fields, extents) + payload


def block_id_for(key: object, salt: str = "") -> bytes:
    """A well-spread 16-byte id for a trace's block key (e.g. a Mooncake hash id)."""
    return hashlib.blake2b(f"{salt}:{key}".encode(), digest_size=BLOCK_ID_BYTES).digest()
