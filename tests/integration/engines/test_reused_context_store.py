"""A round's reused KV persisted in a real KV store as masters + diffs (the trained default model,
held-out text), read back through the diff receiver's path, and decoded: token for token what
the same engine decodes from the KV the prefill had, because the KV read back is that KV bit for
bit. Also what the store holds: the followers' diffs a fraction of their full copies."""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.contracts.segments import PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.reused_context import ContextBlocks
from agentserve.engine.rope import inverse_frequencies
from agentserve.engine.shared_context import CollectiveReuse
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.rope_shift import RopeShift
from agentserve.kvstore.store import KVStore
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import split_corpus, token_stream

pytestmark = pytest.mark.integration

AGENTS, BLOCK_TOKENS = 4, 48
PARAMS = SamplingParams(max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def text() -> list[int]:
    return token_stream(Tokenizer.from_dir(ensure_default_model()), split_corpus().held_out)


def _round(text: list[int]) -> list[SegmentedPrompt]:
    at = iter(range(0, len(text), 64))

    def take(n: int) -> tuple[int, ...]:
        start = next(at)
        return tuple(text[start : start + n])

    blocks = [SharedBlock(f"itest-store-{a}", 0, take(BLOCK_TOKENS)) for a in range(AGENTS)]
    policy = ReusePolicy(recompute_fraction=0.15)
    return [
        SegmentedPrompt(
            (
                PrivateSegment(take(30 + 7 * a)),
                *(blocks[(a + i) % AGENTS] for i in range(AGENTS)),
                PrivateSegment(take(6)),
            ),
            policy,
        )
        for a in range(AGENTS)
    ]


def _import(engine: LLMEngine, tokens: list[int], k: torch.Tensor, v: torch.Tensor, salt: str) -> None:
    """The prompt's KV into the engine's prefix cache, as its full blocks under tenant `salt`."""
    ids = engine.block_ids_for(tokens, salt)
    n, bs = len(ids), engine.block_size
    shape = (k.shape[0], n, bs, k.shape[2], k.shape[3])
    engine.import_blocks(
        serialize_blocks(k[:, : n * bs].reshape(shape), v[:, : n * bs].reshape(shape), ids, engine.fingerprint)
    )


def test_reused_kv_read_back_from_master_and_diffs_decodes_token_for_token(text, tmp_path) -> None:
    engine = LLMEngine.from_dir(ensure_default_model(), EngineConfig())
    model = engine.model
    prompts = _round(text)
    result = CollectiveReuse(model, max_deviation=None).prefill_round(prompts)
    assert [p.stats.led for p in result.prefills] == [True, False, False, False]
    assert not any(p.stats.exact for p in result.prefills[1:])  # every follower reused the masters

    blocks = ContextBlocks(engine.fingerprint, RopeShift(inverse_frequencies(model.config)))
    store = KVStore.open(tmp_path, dram_budget_bytes=0, ssd_budget_bytes=1 << 30, fsync=False)
    try:
        store.put_many(engine.fingerprint, blocks.masters(result.masters.values()))
        layouts = []
        for prompt, prefill in zip(prompts, result.prefills):
            persisted = blocks.prompt(prompt, prefill, result.masters)
            store.put_many(engine.fingerprint, persisted.blocks)
            layouts.append(persisted.layout)
        for a, (prompt, prefill, layout) in enumerate(zip(prompts, result.prefills, layouts)):
            k, v = blocks.assemble(layout, lambda ids: [store.get(i, engine.fingerprint) for i in ids])
            assert torch.equal(k.view(torch.int32), prefill.k.view(torch.int32))
            assert torch.equal(v.view(torch.int32), prefill.v.view(torch.int32))
            tokens = list(prompt.token_ids)
            _import(engine, tokens, prefill.k, prefill.v, f"held-{a}")  # the non-diff path: the prefill's own KV
            _import(engine, tokens, k, v, f"stored-{a}")  # read back from master + diffs
            held = engine.generate(tokens, PARAMS, tenant_salt=f"held-{a}")
            stored = engine.generate(tokens, PARAMS, tenant_salt=f"stored-{a}")
            assert stored.num_cached_tokens == held.num_cached_tokens == (len(tokens) - 1) // 16 * 16
            assert stored.output_token_ids == held.output_token_ids
            assert len(stored.output_token_ids) == PARAMS.max_tokens
    finally:
        store.close()
