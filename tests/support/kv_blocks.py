"""Synthetic KV blocks for kvstore tests: small random tensors in the real block format."""

from __future__ import annotations

import torch

from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_hash import block_ids_for

FP = "tiny-llama@kvstore-test"
SHAPE = (3, 1, 16, 2, 8)  # layers, blocks (always 1 per stored block), block_size, kv heads, head_dim


def chain(n: int, fingerprint: str = FP, salt: str = "t") -> list[bytes]:
    """Ids of a chained prefix of n blocks."""
    return block_ids_for(list(range(n * SHAPE[2])), SHAPE[2], fingerprint, salt)


def make_block(block_id: bytes, fingerprint: str = FP, seed: int = 0) -> bytes:
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(SHAPE, generator=gen)
    v = torch.randn(SHAPE, generator=gen)
    return bytes(serialize_blocks(k, v, block_ids=[block_id], fingerprint=fingerprint, kv_dtype="native"))


def block_size() -> int:
    """Bytes of every `make_block` block (the header reserves room for any checksum value)."""
    return len(make_block(chain(1)[0]))


def payload_offset(data: bytes, layer: int = 1) -> int:
    """A byte offset inside `layer`'s checksummed K/V payload."""
    from agentserve.kv.block_format import read_header

    header = read_header(data)
    return header.payload_offset + header.layers[layer].offset + 5
