"""`storage_reduction` of TokenDance's master + diff storage (issue 16), from real encoded blocks.

In an all-gather round every agent's prompt holds every agent's output (a shared segment), each
after its own private history. Prefix caching stores one full copy of a segment per agent; the
store here keeps one master and, per other agent, a diff block per KV block: the rows the engine
recomputed, nothing for the re-rotation (an offset in the header). As in the engine
(`engine.shared_context`), the master is the copy of the round's first prompt holding the segment
(computed in full, at the position it held it): that agent stores no diff.

    storage_reduction = agents * full block bytes / (master bytes + diff bytes), over the segments

Which rows a sibling recomputes follows the engine's selection (`engine.recompute_selection`):
per segment of L tokens, ceil(fraction * L) tokens, its first `anchor_tokens` and then the most
deviating ones; deviation is data-dependent, so here they are drawn at random from the rest (only
their number and how they spread over KV blocks cost bytes; spread at random, every KV block of
a sibling tends to hold some). Recomputed rows are counted in every layer, the first included:
there the engine's freshly rotated key differs from the re-rotated master in its last bits, so
the diff, which is exact, stores it. Every diff is restored and checked bit for bit against the
sibling it encodes, so the figures are those of blocks that round-trip.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

import torch

from agentserve.contracts.segments import DEFAULT_RECOMPUTE_FRACTION, Sibling
from agentserve.kv.block_diff import full_block, restore_block, serialize_diff
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_hash import block_ids_for
from agentserve.kv.block_header import read_header
from agentserve.kv.rope_shift import RopeShift
from agentserve.model_files.presets import get_preset

FINGERPRINT = "tokendance-storage-bench"
ANCHOR_TOKENS = 2  # the engine selection's default (`engine.recompute_selection.ANCHOR_TOKENS`)


@dataclass(frozen=True)
class StorageFigures:
    preset: str
    agents: int
    segments: int  # shared segments measured (each held by every agent)
    segment_tokens: int
    kv_block_tokens: int
    recompute_fraction: float
    recomputed_per_sibling: int  # tokens of a segment each agent recomputes
    full_copy_bytes: int  # what prefix caching stores: every agent's full copy of every segment
    master_bytes: int
    diff_bytes: int  # all diff blocks, headers included
    diff_header_bytes: int
    storage_reduction: float
    bytes_per_agent_full: float
    bytes_per_agent_stored: float
    restored_exact: bool  # every diff restored to its sibling bit for bit

    def as_dict(self) -> dict:
        return asdict(self)


def measure_storage(
    *,
    agents: int = 32,
    segments: int = 2,
    segment_tokens: int = 256,
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION,
    preset: str = "tiny",
    kv_block_tokens: int = 16,
    max_private_tokens: int = 2048,
    seed: int = 0,
) -> StorageFigures:
    """Store `segments` shared segments as master + one sibling diff per agent and count bytes."""
    _check(agents, segments, segment_tokens, recompute_fraction, kv_block_tokens)
    spec = get_preset(preset)
    shift = RopeShift.for_theta(spec.rope_theta, spec.head_dim)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    shape = (spec.num_hidden_layers, segment_tokens, spec.num_key_value_heads, spec.head_dim)
    budget = min(segment_tokens, math.ceil(recompute_fraction * segment_tokens - 1e-9))
    full = master = diffs = headers = 0
    exact = True
    for segment in range(segments):
        k = torch.randn(shape, generator=gen).half()
        v = torch.randn(shape, generator=gen).half()
        master_ids = block_ids_for(list(range(segment_tokens)), kv_block_tokens, FINGERPRINT, f"master{segment}")
        leader_start = _start(rng, max_private_tokens, segment, segment_tokens)
        for b, master_id in enumerate(master_ids):
            position = leader_start + b * kv_block_tokens
            master += len(full_block(*_block(k, v, b, kv_block_tokens), master_id, FINGERPRINT, position))
        full += agents * len(_full_copy(k, v, master_ids, kv_block_tokens))  # the leader's copy counts too
        for agent in range(1, agents):
            rows = _selection(rng, segment_tokens, budget)
            offset = _start(rng, max_private_tokens, segment, segment_tokens) - leader_start
            sibling = Sibling(f"segment{segment}", offset, segment_tokens, rows)
            sk, sv = _sibling(k, v, sibling, shift, gen)
            sibling_ids = block_ids_for(
                list(range(segment_tokens)), kv_block_tokens, FINGERPRINT, f"a{agent}s{segment}"
            )
            for b, (master_id, sibling_id) in enumerate(zip(master_ids, sibling_ids)):
                mk, mv = _block(k, v, b, kv_block_tokens)
                bk, bv = _block(sk, sv, b, kv_block_tokens)
                diff = serialize_diff(
                    mk,
                    mv,
                    bk,
                    bv,
                    block_id=sibling_id,
                    master_id=master_id,
                    fingerprint=FINGERPRINT,
                    position_offset=sibling.position_offset,
                    shift=shift,
                )
                diffs += len(diff)
                headers += read_header(diff).payload_offset
                master_block = full_block(mk, mv, master_id, FINGERPRINT, leader_start + b * kv_block_tokens)
                restored = restore_block(master_block, diff, shift)
                exact = exact and _payload(restored) == _payload(_serialized(bk, bv, sibling_id))
    stored = master + diffs
    return StorageFigures(
        preset=preset,
        agents=agents,
        segments=segments,
        segment_tokens=segment_tokens,
        kv_block_tokens=kv_block_tokens,
        recompute_fraction=recompute_fraction,
        recomputed_per_sibling=budget,
        full_copy_bytes=full,
        master_bytes=master,
        diff_bytes=diffs,
        diff_header_bytes=headers,
        storage_reduction=full / stored,
        bytes_per_agent_full=full / agents,
        bytes_per_agent_stored=stored / agents,
        restored_exact=exact,
    )


def storage_curve(
    fractions: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3), **kwargs
) -> list[StorageFigures]:
    """`measure_storage` at each recompute fraction (the same segments, agents and offsets)."""
    return [measure_storage(recompute_fraction=f, **kwargs) for f in fractions]


def _check(agents: int, segments: int, segment_tokens: int, fraction: float, kv_block_tokens: int) -> None:
    for name, value in (("agents", agents), ("segments", segments), ("kv_block_tokens", kv_block_tokens)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if segment_tokens <= 0 or segment_tokens % kv_block_tokens:
        raise ValueError(f"segment_tokens must be a positive multiple of kv_block_tokens, got {segment_tokens}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"recompute_fraction must be in [0, 1], got {fraction}")


def _start(rng: random.Random, max_private_tokens: int, segment: int, segment_tokens: int) -> int:
    """Where an agent's prompt holds a segment: after its private history and the segments before."""
    return rng.randint(1, max_private_tokens) + segment * segment_tokens


def _full_copy(k: torch.Tensor, v: torch.Tensor, ids: list[bytes], tokens: int) -> bytes:
    """One agent's full copy of a segment, as prefix caching stores it (its KV blocks, concatenated)."""
    return b"".join(_serialized(*_block(k, v, b, tokens), block_id) for b, block_id in enumerate(ids))


def _serialized(k: torch.Tensor, v: torch.Tensor, block_id: bytes) -> bytes:
    return bytes(serialize_blocks(k.unsqueeze(1), v.unsqueeze(1), [block_id], FINGERPRINT))


def _selection(rng: random.Random, tokens: int, budget: int) -> tuple[int, ...]:
    anchors = list(range(min(budget, ANCHOR_TOKENS)))
    rest = rng.sample(range(len(anchors), tokens), budget - len(anchors))
    return tuple(sorted(anchors + rest))


def _sibling(
    k: torch.Tensor, v: torch.Tensor, sibling: Sibling, shift: RopeShift, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The segment as the agent's engine holds it: the master shifted, the selected rows recomputed
    (here: moved off by a small random amount, in every layer)."""
    sk = torch.stack([shift.shift(k[layer], sibling.position_offset) for layer in range(k.shape[0])])
    sv = v.clone()
    rows = torch.tensor(sibling.recomputed_rows, dtype=torch.long)
    if len(rows):
        noise = (k.shape[0], len(rows), k.shape[2], k.shape[3])
        sk[:, rows] += (0.1 * torch.randn(noise, generator=gen)).half()
        sv[:, rows] += (0.1 * torch.randn(noise, generator=gen)).half()
    return sk, sv


def _block(k: torch.Tensor, v: torch.Tensor, index: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    span = slice(index * tokens, (index + 1) * tokens)
    return k[:, span].contiguous(), v[:, span].contiguous()


def _payload(block: bytes | bytearray) -> bytes:
    """A full block's payload (headers differ by the position a restored block records)."""
    return bytes(block[read_header(block).payload_offset :])
