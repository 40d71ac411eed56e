"""`storage_reduction` of TokenDance's master + diff storage (issue 16): what a real KV store holds.

One all-gather round of the trained default model on held-out text: every agent's prompt holds
its private history, then `segments` shared segments (other agents' outputs) in an order of its
own, then a few private tokens. `CollectiveReuse` prefills the round as the engine does (the
round's first prompt leads: its copies are the masters; every other prompt reuses them and
recomputes `recompute_fraction` of each segment's tokens, chosen by the engine's selection, no
fallback). Then the shared segments' KV goes into real `KVStore`s on disk:

- prefix caching: every agent's full copy of every segment (full blocks);
- master + diffs: one master per segment, and per other agent a diff per chunk
  (`engine.reused_context`), once with each diff codec: `rows` (the differing rows raw) and
  `xor-deflate` (a lossless delta against the shifted master, the default).

    storage_reduction = bytes the prefix store holds / bytes the master + diff store holds

counted as the store accounts them (`KVStore.stats`: the blocks' bytes) and as the file system
allocates them (`on_disk`). Every diff is read back from the store through the receiver's path
and checked bit for bit against the KV the prefill had, so the figures are those of blocks that
restore exactly.

Side by side, `dense_row_bound` is what no row-level diff can beat: every agent but the leader
storing exactly its recomputed share of rows in every layer but the first (a blend hands on the
re-rotated master's first-layer KV: `engine.blend`), raw, with no header: agents / (1 + (agents -
1) * share * (layers - 1) / layers). A lossless coder only shrinks those rows as far as their bits
allow: fp32 values that moved, to about nine tenths. `fraction_for_target` projects, from the
measured bytes per recomputed row and per diff, the recompute fraction at which the measured
storage would reach the issue's 11x.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import random
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from agentserve.contracts.segments import (
    DEFAULT_RECOMPUTE_FRACTION,
    PrivateSegment,
    ReusePolicy,
    SegmentedPrompt,
    SharedBlock,
)
from agentserve.engine.reused_context import Block, ContextBlocks, ContextLayout, PersistedPrompt
from agentserve.engine.shared_context import CollectiveReuse, ReusedPrefill
from agentserve.kv.block_header import read_header
from agentserve.kv.diff_layout import ROWS, XOR_DEFLATE
from agentserve.kv.rope_shift import RopeShift
from agentserve.kvstore.store import KVStore

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

TARGET = 11.0  # the storage_reduction target
CHUNK_TOKENS = 128  # a stored piece's tokens at most (`engine.reused_context`)
TAIL_TOKENS = 8
PRIVATE_TOKENS = (32, 160)  # an agent's private history before the segments: drawn in this range


@dataclass(frozen=True)
class StorageFigures:
    agents: int
    segments: int  # shared segments measured (each held by every agent)
    segment_tokens: int
    chunk_tokens: int
    recompute_fraction: float
    recomputed_share: float  # of the followers' shared tokens, recomputed (the engine's selection)
    full_copy_bytes: int  # the prefix store: every agent's full copy of every segment
    master_bytes: int
    diff_bytes: int  # xor-deflate diffs, headers included
    diff_header_bytes: int
    diff_bytes_rows: int  # the same diffs with the rows raw
    storage_reduction: float  # full_copy_bytes / (master_bytes + diff_bytes): the store's accounting
    storage_reduction_on_disk: float  # the same over the file system's allocated bytes
    storage_reduction_rows: float  # with the rows raw
    dense_row_bound: float  # agents / (1 + (agents - 1) * recomputed_share * stored_layers / layers)
    fraction_for_target: float | None  # projected fraction reaching TARGET (None: not even at 0)
    bytes_per_agent_full: float
    bytes_per_agent_stored: float
    restored_exact: bool  # every diff read back from the store bit for bit the prefill's KV

    def as_dict(self) -> dict:
        return asdict(self)


@functools.cache
def _model_and_text() -> tuple:
    """The trained default model (fp32, as the engine runs it) and held-out text, loaded once."""
    from agentserve.engine.default_model import ensure_default_model
    from agentserve.engine.loader import load_model
    from agentserve.engine.rope import inverse_frequencies
    from agentserve.model_files.tokenizer import Tokenizer
    from agentserve.training.corpus import split_corpus, token_stream

    folder = ensure_default_model()
    model, fingerprint = load_model(folder, "fp32")
    text = token_stream(Tokenizer.from_dir(folder), split_corpus().held_out)
    return model, fingerprint, RopeShift(inverse_frequencies(model.config)), text


def measure_storage(
    *,
    agents: int = 32,
    segments: int = 2,
    segment_tokens: int = 128,
    recompute_fraction: float = DEFAULT_RECOMPUTE_FRACTION,
    chunk_tokens: int = CHUNK_TOKENS,
    seed: int = 0,
) -> StorageFigures:
    """Prefill one round of `agents` prompts holding `segments` shared segments, store it both
    ways and count the bytes the stores hold."""
    _check(agents, segments, segment_tokens, recompute_fraction, chunk_tokens)
    model, fingerprint, shift, text = _model_and_text()
    prompts = _round(text, agents, segments, segment_tokens, recompute_fraction, seed)
    result = CollectiveReuse(model, max_deviation=None).prefill_round(prompts)
    coded = ContextBlocks(fingerprint, shift, chunk_tokens=chunk_tokens, codec=XOR_DEFLATE)
    raw = ContextBlocks(fingerprint, shift, chunk_tokens=chunk_tokens, codec=ROWS)
    masters = coded.masters(result.masters.values())
    full: list[Block] = []
    diffs: list[Block] = []
    diffs_rows: list[Block] = []
    layouts: list[ContextLayout] = []
    for prompt, prefill in zip(prompts, result.prefills):
        full += _shared(coded.prompt(prompt, _as_full(prefill), result.masters), prompt)[1]
        layout, blocks = _shared(coded.prompt(prompt, prefill, result.masters), prompt)
        diffs += blocks
        layouts.append(layout)
        diffs_rows += _shared(raw.prompt(prompt, prefill, result.masters), prompt)[1]
    if any(not p.stats.led and p.stats.exact for p in result.prefills):
        raise RuntimeError("a follower was served exactly: the measurement needs every follower to reuse")
    with tempfile.TemporaryDirectory(prefix="tokendance-storage-") as tmp:
        with _store(Path(tmp, "prefix"), fingerprint, full) as (_, full_bytes, full_disk):
            pass
        with _store(Path(tmp, "masters"), fingerprint, masters) as (_, master_bytes, _):
            pass
        with _store(Path(tmp, "rows"), fingerprint, masters + diffs_rows) as (_, rows_bytes, _):
            pass
        with _store(Path(tmp, "diffs"), fingerprint, masters + diffs) as (store, stored_bytes, stored_disk):
            exact = all(
                _restores_exactly(store, coded, layout, prompt, prefill)
                for layout, prompt, prefill in zip(layouts, prompts, result.prefills)
            )
    diff_bytes = stored_bytes - master_bytes
    followers = [p for p in result.prefills if not p.stats.led]
    share = sum(p.stats.recomputed_shared_tokens for p in followers) / sum(p.stats.shared_tokens for p in followers)
    headers = sum(read_header(data).payload_offset for _, data in diffs)
    return StorageFigures(
        agents=agents,
        segments=segments,
        segment_tokens=segment_tokens,
        chunk_tokens=chunk_tokens,
        recompute_fraction=recompute_fraction,
        recomputed_share=round(share, 4),
        full_copy_bytes=full_bytes,
        master_bytes=master_bytes,
        diff_bytes=diff_bytes,
        diff_header_bytes=headers,
        diff_bytes_rows=rows_bytes - master_bytes,
        storage_reduction=full_bytes / stored_bytes,
        storage_reduction_on_disk=full_disk / stored_disk,
        storage_reduction_rows=full_bytes / rows_bytes,
        dense_row_bound=agents / (1 + (agents - 1) * share * _stored_layer_share(model)),
        fraction_for_target=_fraction_for_target(
            agents, full_bytes, master_bytes, headers, diff_bytes - headers, share, recompute_fraction
        ),
        bytes_per_agent_full=full_bytes / agents,
        bytes_per_agent_stored=stored_bytes / agents,
        restored_exact=exact,
    )


def storage_curve(fractions: tuple[float, ...] = (0.05, 0.1, 0.15, 0.2, 0.3), **kwargs: Any) -> list[StorageFigures]:
    """`measure_storage` at each recompute fraction (the same prompts)."""
    return [measure_storage(recompute_fraction=f, **kwargs) for f in fractions]


def _check(agents: int, segments: int, segment_tokens: int, fraction: float, chunk_tokens: int) -> None:
    if agents < 2:
        raise ValueError(f"agents must be at least 2 (a leader and a follower), got {agents}")
    for name, value in (("segments", segments), ("segment_tokens", segment_tokens), ("chunk_tokens", chunk_tokens)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"recompute_fraction must be in [0, 1), got {fraction}")


def _round(
    text: list[int], agents: int, segments: int, segment_tokens: int, fraction: float, seed: int
) -> list[SegmentedPrompt]:
    """Agent a: a private history (a window of the text), the segments rotated by a, a tail."""
    rng = random.Random(seed)
    if len(text) < segments * segment_tokens + PRIVATE_TOKENS[1] + TAIL_TOKENS:
        raise ValueError(f"the held-out text ({len(text)} tokens) is too short for {segments} x {segment_tokens}")

    def window(n: int) -> tuple[int, ...]:
        start = rng.randrange(0, len(text) - n)
        return tuple(text[start : start + n])

    blocks = [SharedBlock(f"segment-{s}", 0, window(segment_tokens)) for s in range(segments)]
    policy = ReusePolicy(recompute_fraction=fraction)
    return [
        SegmentedPrompt(
            (
                PrivateSegment(window(rng.randint(*PRIVATE_TOKENS))),
                *(blocks[(a + s) % segments] for s in range(segments)),
                PrivateSegment(window(TAIL_TOKENS)),
            ),
            policy,
        )
        for a in range(agents)
    ]


def _as_full(prefill: ReusedPrefill) -> ReusedPrefill:
    """The prefill with no sibling: every piece stored as a full block (what prefix caching keeps)."""
    return dataclasses.replace(prefill, siblings=())


def _shared(persisted: PersistedPrompt, prompt: SegmentedPrompt) -> tuple[ContextLayout, list[Block]]:
    """The pieces and blocks of `persisted` that hold the prompt's shared segments."""
    spans = [(s.start, s.end) for s in prompt.shared_spans()]
    pieces = tuple(p for p in persisted.layout.pieces if any(a <= p.start < b for a, b in spans))
    ids = {p.block_id for p in pieces}
    return ContextLayout(persisted.layout.num_tokens, pieces), [b for b in persisted.blocks if b[0] in ids]


@contextlib.contextmanager
def _store(data_dir: Path, fingerprint: str, blocks: Sequence[Block]) -> Iterator[tuple[KVStore, int, int]]:
    """A fresh store at `data_dir` holding `blocks`, the bytes it accounts for them, and the bytes
    its files occupy on disk."""
    store = KVStore.open(data_dir, dram_budget_bytes=0, ssd_budget_bytes=1 << 40, fsync=False)
    try:
        store.put_many(fingerprint, list(blocks))
        on_disk = sum(os.stat(p).st_blocks * 512 for p in (data_dir / "blocks").rglob("*") if p.is_file())
        yield store, store.stats().ssd.bytes, on_disk
    finally:
        store.close()


def _restores_exactly(
    store: KVStore, blocks: ContextBlocks, layout: ContextLayout, prompt: SegmentedPrompt, prefill: ReusedPrefill
) -> bool:
    """The prompt's shared segments read back from the store (diffs restored against their
    masters) are, bit for bit, the KV its prefill had."""
    k, v = blocks.assemble(layout, lambda ids: [store.get(i, blocks.fingerprint) for i in ids])
    rows = torch.cat([torch.arange(s.start, s.end) for s in prompt.shared_spans()])
    return _same_bits(k, prefill.k.index_select(1, rows)) and _same_bits(v, prefill.v.index_select(1, rows))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def _stored_layer_share(model: CausalLM) -> float:
    """The share of layers whose recomputed rows a diff stores: all but the first (`engine.blend`
    hands on the re-rotated master's first-layer KV)."""
    layers = model.config.num_hidden_layers
    return (layers - 1) / layers


def _fraction_for_target(
    agents: int, full: int, masters: int, headers: int, row_bytes: int, share: float, fraction: float
) -> float | None:
    """The fraction at which full / (masters + diffs) would reach TARGET, the diffs' row bytes
    scaled from the measured share to that fraction (headers as measured); None when the masters
    and headers alone stay above the target's budget."""
    budget = full / TARGET - masters - headers  # what the diffs' rows may take
    if budget <= 0:
        return None
    if row_bytes == 0 or share == 0:
        return fraction
    per_share = row_bytes / share  # bytes of diff rows per unit of recomputed share
    return round(min(1.0, math.floor(budget / per_share * 1000) / 1000), 3)
