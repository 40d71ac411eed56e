"""A shared block's master and siblings in the real formats (`kv.block_diff`), for kv, kvstore and
fabric tests: random K/V, each sibling the master re-rotated with a few rows recomputed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentserve.kv.block_diff import full_block, serialize_diff
from agentserve.kv.block_hash import block_ids_for
from agentserve.kv.diff_layout import ROWS
from agentserve.kv.rope_shift import RopeShift

FP = "tiny-llama@kvstore-test"
LAYERS, BLOCK, HEADS, HEAD_DIM = 3, 16, 2, 8
SHIFT = RopeShift.for_theta(10000.0, HEAD_DIM)
MASTER_POSITION = 40


@dataclass(frozen=True)
class Sibling:
    block_id: bytes
    k: torch.Tensor  # [layers, block_size, heads, head_dim]
    v: torch.Tensor
    position_offset: int
    rows: tuple[int, ...]  # recomputed (differing) in every layer but the first
    diff: bytes


@dataclass(frozen=True)
class Family:
    master_id: bytes
    k: torch.Tensor
    v: torch.Tensor
    master: bytes
    siblings: list[Sibling]


def block_id(salt: str) -> bytes:
    return block_ids_for(list(range(BLOCK)), BLOCK, FP, salt)[0]


def family(
    salt: str = "shared",
    offsets=(-30, 7, 120),
    rows=(0, 1, 5),
    dtype=torch.bfloat16,
    seed: int = 0,
    codec: str = ROWS,
) -> Family:
    """A master at MASTER_POSITION and one sibling per offset, each recomputing `rows` in layers 1..:
    layer 0's keys and values depend only on the token, so a recompute leaves them as shifted.
    The diffs are written with `codec`."""
    gen = torch.Generator().manual_seed(seed)
    shape = (LAYERS, BLOCK, HEADS, HEAD_DIM)
    k, v = torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype)
    master_id = block_id(salt)
    siblings = []
    for n, offset in enumerate(offsets):
        sk = torch.stack([SHIFT.shift(k[layer], offset) for layer in range(LAYERS)])
        sv = v.clone()
        index = torch.tensor(rows, dtype=torch.long)
        sk[1:, index] = torch.randn((LAYERS - 1, len(rows), HEADS, HEAD_DIM), generator=gen).to(dtype)
        sv[1:, index] = torch.randn((LAYERS - 1, len(rows), HEADS, HEAD_DIM), generator=gen).to(dtype)
        sibling_id = block_id(f"{salt}/sibling{n}")
        diff = serialize_diff(
            k,
            v,
            sk,
            sv,
            block_id=sibling_id,
            master_id=master_id,
            fingerprint=FP,
            position_offset=offset,
            shift=SHIFT,
            codec=codec,
        )
        siblings.append(Sibling(sibling_id, sk, sv, offset, tuple(rows), bytes(diff)))
    master = bytes(full_block(k, v, master_id, FP, position=MASTER_POSITION))
    return Family(master_id, k, v, master, siblings)
