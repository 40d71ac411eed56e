"""Reused KV between a served turn's engines and the store (`engine_service/reused_kv.py`), on the
tiny model: a round's reused prompts persisted as masters (each once) and diffs, the decode
engine's restore giving the prefill's KV bit for bit and decoding over it as over the prefill's
own KV, the next round restoring the history and storing only what follows it; a missing master
or a corrupt diff restores nothing (the caller recomputes)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.contracts.context import tokens_digest
from agentserve.contracts.segments import PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import block_prefix
from agentserve.engine.shared_context import PrefixKV
from agentserve.engine_service import reused_kv

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)


class FakeStore:
    """`KVMover`'s two calls `reused_kv` makes, over a dict; `fetch` stops at the first block it
    lacks, as the store's Get does."""

    def __init__(self) -> None:
        self.blocks: dict[bytes, bytes] = {}
        self.puts: list[list[bytes]] = []

    async def put(self, blocks):
        self.puts.append([block_id for block_id, _ in blocks])
        self.blocks.update(blocks)
        return len(blocks)

    async def fetch(self, ids):
        found = {}
        for block_id in ids:
            if block_id not in self.blocks:
                break
            found[block_id] = self.blocks[block_id]
        return found


def _tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(torch.randint(300, 8000, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


def _round(r: int, histories: list[tuple[int, ...]]) -> list[SegmentedPrompt]:
    blocks = [SharedBlock(f"r{r}/agent-{i}", r, _tokens(100 * r + i, 32)) for i in range(3)]
    return [
        SegmentedPrompt(
            (PrivateSegment(histories[a]), *(blocks[(a + i) % 3] for i in range(3)), PrivateSegment(_tokens(9, 5))),
            ReusePolicy(recompute_fraction=0.25),
        )
        for a in range(3)
    ]


def _prefill(engine: LLMEngine, prompt: SegmentedPrompt, prefix: PrefixKV | None = None):
    seq = engine.add_request(prompt.token_ids, SamplingParams(max_tokens=1), segments=prompt, segment_prefix=prefix)
    while not seq.finished:
        engine.step()
    return seq


def _decode(engine: LLMEngine, tokens: list[int], k: torch.Tensor, v: torch.Tensor) -> list[int]:
    prefix = block_prefix(k, v, engine.block_size)
    seq = engine.add_request(tokens, GREEDY, external_prefix=prefix, generated=1, exact_prefix=False)
    while not seq.finished:
        engine.step()
    assert not seq.exact_kv and seq.num_cached_tokens == len(tokens) - 1
    assert engine.blocks.cached_prefix(engine.block_ids_for(tokens)) == 0  # reused KV: never under chained ids
    return seq.output_token_ids


def test_a_served_round_persists_masters_once_and_diffs_and_decodes_over_what_it_restores(tiny_model_dir) -> None:
    prefill_engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(reuse_max_deviation=None))
    decode_engine = LLMEngine.from_dir(tiny_model_dir)
    store, masters = FakeStore(), reused_kv.StoredMasters()
    blocks = reused_kv.context_blocks(prefill_engine, "tenant-a")
    prompts = _round(1, [_tokens(a, 20 + 3 * a) for a in range(3)])
    layouts = []
    for a, prompt in enumerate(prompts):
        seq = _prefill(prefill_engine, prompt)
        assert seq.reused is not None and seq.exact_kv == (a == 0)  # the first leads: exact KV
        persisted = asyncio.run(reused_kv.persist(store, blocks, prompt, seq.reused, None, masters))  # type: ignore[arg-type]
        assert persisted.masters == (3 if a == 0 else 0)  # a round's masters stored once
        assert persisted.diffs == (0 if a == 0 else 3)
        assert persisted.layout.holds(prompt.token_ids)
        restored = asyncio.run(reused_kv.restore(store, blocks, persisted.layout, prefill_engine.dtype))  # type: ignore[arg-type]
        assert not isinstance(restored, str)
        assert torch.equal(restored[0], seq.reused.prefill.k) and torch.equal(restored[1], seq.reused.prefill.v)
        tokens = list(prompt.token_ids) + [seq.token_ids[-1]]
        own = _decode(decode_engine, tokens, seq.reused.prefill.k.clone(), seq.reused.prefill.v.clone())
        assert _decode(decode_engine, tokens, *restored) == own
        layouts.append((persisted.layout, tokens + own[1:]))

    # The next round: each history (the last prompt, its output) restored as the prefix; only the
    # rows after it are stored, the layout's first pieces are the last one's.
    nxt = _round(2, [tuple(history) for _, history in layouts])
    for (layout, _), prompt in zip(layouts, nxt):
        k, v = asyncio.run(reused_kv.restore(store, blocks, layout, prefill_engine.dtype))  # type: ignore[arg-type]
        seq = _prefill(prefill_engine, prompt, PrefixKV(k, v))
        assert seq.reused is not None and seq.reused.prefix_tokens == layout.num_tokens and not seq.exact_kv
        put_before = len(store.puts)
        persisted = asyncio.run(reused_kv.persist(store, blocks, prompt, seq.reused, layout, masters))  # type: ignore[arg-type]
        assert persisted.layout.pieces[: len(layout.pieces)] == layout.pieces
        assert not set(store.puts[put_before]) & set(layout.block_ids)
        assert persisted.layout.tokens_digest == tokens_digest(prompt.token_ids)
        again = asyncio.run(reused_kv.restore(store, blocks, persisted.layout, prefill_engine.dtype))  # type: ignore[arg-type]
        assert not isinstance(again, str) and torch.equal(again[0], seq.reused.prefill.k)


def test_a_missing_master_or_a_corrupt_diff_restores_nothing(tiny_model_dir) -> None:
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(reuse_max_deviation=None))
    store, masters = FakeStore(), reused_kv.StoredMasters()
    blocks = reused_kv.context_blocks(engine, "tenant-a")
    prompts = _round(1, [_tokens(a, 20 + 3 * a) for a in range(3)])
    layout = None
    for prompt in prompts[:2]:  # a leader and a follower
        seq = _prefill(engine, prompt)
        assert seq.reused is not None
        layout = asyncio.run(reused_kv.persist(store, blocks, prompt, seq.reused, None, masters)).layout  # type: ignore[arg-type]
    assert layout is not None and layout.diff_ids
    diff_id = layout.diff_ids[0]
    diff = store.blocks[diff_id]
    store.blocks[diff_id] = diff[:-1] + bytes([diff[-1] ^ 0xFF])  # a flipped byte: the layer's checksum fails
    assert asyncio.run(reused_kv.restore(store, blocks, layout, engine.dtype)) == "corrupt"  # type: ignore[arg-type]
    store.blocks[diff_id] = diff
    del store.blocks[layout.master_ids[0]]
    assert asyncio.run(reused_kv.restore(store, blocks, layout, engine.dtype)) == "missing"  # type: ignore[arg-type]
    # Another tenant's ids differ (the namespace is hashed in): its blocks are not these.
    other = reused_kv.context_blocks(engine, "tenant-b")
    assert other.masters(seq.reused.masters.values())[0][0] not in store.blocks
