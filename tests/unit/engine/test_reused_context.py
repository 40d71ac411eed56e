"""A reused prompt's KV in a real store as masters + diffs, read back bit for bit; what a prompt
stores is exactly what it recomputed."""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.engine.loader import load_model
from agentserve.engine.reused_context import ContextBlocks, MissingBlockError
from agentserve.engine.rope import inverse_frequencies
from agentserve.engine.shared_context import CollectiveReuse
from agentserve.kv.block_header import read_header
from agentserve.kv.diff_layout import ROWS, XOR_DEFLATE
from agentserve.kv.rope_shift import RopeShift
from agentserve.kvstore.layout import block_path
from agentserve.kvstore.store import KVStore

pytestmark = pytest.mark.unit

FP = "tiny@reused-context-test"


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)[0]


@pytest.fixture
def store(tmp_path):
    opened = KVStore.open(tmp_path, dram_budget_bytes=0, ssd_budget_bytes=1 << 30, fsync=False)
    yield opened
    opened.close()


def _tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(torch.randint(300, 8000, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


BLOCKS = [SharedBlock(f"agent-{i}", 0, _tokens(100 + i, 24)) for i in range(3)]


def _round(policies) -> list[SegmentedPrompt]:
    orders = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]
    return [
        SegmentedPrompt(
            (PrivateSegment(_tokens(a, 10 + 3 * a)), *(BLOCKS[i] for i in order), PrivateSegment(_tokens(50 + a, 4))),
            policy,
        )
        for a, (order, policy) in enumerate(zip(orders, policies))
    ]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def fetch_from(store: KVStore):
    return lambda ids: [store.get(i, FP) for i in ids]


@pytest.mark.parametrize("codec", [ROWS, XOR_DEFLATE])
def test_each_prompt_reads_back_bit_for_bit_and_stores_only_what_it_recomputed(model, store, codec):
    reuse = CollectiveReuse(model, max_deviation=None)
    reused = ReusePolicy(recompute_fraction=0.25)
    prompts = _round([reused, reused, EXACT])
    result = reuse.prefill_round(prompts)
    blocks = ContextBlocks(FP, RopeShift(inverse_frequencies(model.config)), chunk_tokens=16, codec=codec)
    store.put_many(FP, blocks.masters(result.masters.values()))
    assert store.stats().ssd.blocks == 6  # 3 masters of 24 tokens: chunks of 16 and 8
    persisted = [blocks.prompt(p, pre, result.masters) for p, pre in zip(prompts, result.prefills)]
    for each in persisted:
        store.put_many(FP, each.blocks)

    for prompt, prefill, each in zip(prompts, result.prefills, persisted):
        k, v = blocks.assemble(each.layout, fetch_from(store))
        assert same_bits(k, prefill.k) and same_bits(v, prefill.v)
        bounds = [(p.start, p.end) for p in each.layout.pieces]  # the prompt, in order, chunks of <= 16
        assert bounds[0][0] == 0 and bounds[-1][1] == len(prompt.token_ids) == each.layout.num_tokens
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:])) and all(0 < e - s <= 16 for s, e in bounds)

    leader, follower, exact = persisted
    # The leader holds the masters: its shared pieces name them and it stores its private rows only.
    assert len(leader.blocks) == 2 and len(leader.layout.master_ids) == 0
    assert {p.block_id for p in leader.layout.pieces[1:-1]} == {
        block_id for block_id, _ in blocks.masters(result.masters.values())
    }
    # The follower stores a diff per chunk of each shared block, with only rows it recomputed.
    diffs = [p for p in follower.layout.pieces if p.master_id is not None]
    assert len(diffs) == 6 and len(follower.layout.master_ids) == 6
    siblings = {s.master_id: s for s in result.prefills[1].siblings}
    data = dict(follower.blocks)
    for span in prompts[1].shared_spans():
        recomputed = siblings[span.block.content_id].recomputed_rows
        for piece in (p for p in diffs if span.start <= p.start < span.end):
            header = read_header(data[piece.block_id])
            assert header.diff is not None and header.diff.codec == codec
            chunk_rows = tuple(
                r - (piece.start - span.start) for r in recomputed if piece.start <= span.start + r < piece.end
            )
            assert header.diff.rows[0] == ()  # layer 0: the re-rotated master's KV (`engine.blend`)
            assert all(rows == chunk_rows for rows in header.diff.rows[1:])  # deeper layers: every recomputed row moved
    # A prompt served exactly is its own KV: full blocks, no master.
    assert exact.layout.master_ids == [] and len(exact.blocks) == len(exact.layout.pieces)


def test_a_missing_master_or_a_corrupt_diff_reads_as_missing(model, store, tmp_path):
    reuse = CollectiveReuse(model, max_deviation=None)
    prompts = _round([ReusePolicy(recompute_fraction=0.25)] * 2)
    result = reuse.prefill_round(prompts)
    blocks = ContextBlocks(FP, RopeShift(inverse_frequencies(model.config)), chunk_tokens=16)
    follower = blocks.prompt(prompts[1], result.prefills[1], result.masters)
    with pytest.raises(MissingBlockError, match="is not stored"):  # nothing stored yet
        blocks.assemble(follower.layout, fetch_from(store))
    store.put_many(FP, blocks.masters(result.masters.values()))
    store.put_many(FP, follower.blocks)
    piece = next(p for p in follower.layout.pieces if p.master_id is not None)
    path = block_path(tmp_path, piece.block_id, diff=True)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last layer's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(MissingBlockError, match=f"block {piece.block_id.hex()} of prompt rows"):
        blocks.assemble(follower.layout, fetch_from(store))  # the store found it corrupt and dropped it
    assert store.stats().corrupt_dropped == 1


def test_bad_parameters_are_refused_naming_them():
    shift = RopeShift.for_theta(10000.0, 8)
    with pytest.raises(ValueError, match="chunk_tokens must be positive, got 0"):
        ContextBlocks(FP, shift, chunk_tokens=0)
    with pytest.raises(ValueError, match="codec must be one of rows, xor-deflate, got 'zip'"):
        ContextBlocks(FP, shift, codec="zip")
