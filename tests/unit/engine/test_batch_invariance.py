"""Batch invariance with the real default model: a sequence's logits at every step are the same bits
whether it runs alone or batched with sequences of other lengths, in decode and in prefill, so its
greedy tokens never depend on what else the engine serves."""

from __future__ import annotations

import random

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import ModelRunner
from agentserve.engine.sequence import Sequence

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=24, ignore_eos=True)


class RecordingRunner(ModelRunner):
    """The engine's own runner, keeping a copy of each logits row it returns, per request."""

    def __init__(self, engine: LLMEngine) -> None:
        assert isinstance(engine.runner, ModelRunner)
        super().__init__(engine.runner.model, engine.runner.pool, engine.runner.batch_invariant)
        self.rows: dict[str, list[torch.Tensor]] = {}

    def prefill(self, seq: Sequence, *args, **kwargs) -> torch.Tensor:
        logits = super().prefill(seq, *args, **kwargs)
        self.rows.setdefault(seq.request_id, []).append(logits.clone())
        return logits

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        logits = super().decode(seqs)
        for seq, row in zip(seqs, logits):
            self.rows.setdefault(seq.request_id, []).append(row.clone())
        return logits


def recording_engine(reference: LLMEngine, **config) -> tuple[LLMEngine, RecordingRunner]:
    engine = LLMEngine(reference.model, reference.fingerprint, EngineConfig(kv_cache_bytes=32 << 20, **config))
    engine.runner = runner = RecordingRunner(engine)
    return engine, runner


def prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(5, 8192) for _ in range(length)]


def assert_same_bits(alone: list[torch.Tensor], batched: list[torch.Tensor]) -> None:
    assert len(alone) == len(batched)
    differing = [step for step, (a, b) in enumerate(zip(alone, batched)) if not torch.equal(a, b)]
    assert differing == []


def run_alone(reference: LLMEngine, tokens: list[int]) -> tuple[Sequence, list[torch.Tensor]]:
    engine, runner = recording_engine(reference)
    seq = engine.generate(tokens, GREEDY)
    return seq, runner.rows[seq.request_id]


def test_decode_logits_are_the_same_bits_alone_and_batched_with_changing_company(reference) -> None:
    x = prompt(0, 70)
    alone, alone_rows = run_alone(reference, x)
    engine, runner = recording_engine(reference, max_batch_size=8)
    watched = engine.add_request(x, GREEDY)
    # Company of other lengths, shorter and longer, some across decode-split boundaries (64), joining
    # over the first steps and finishing at different ones: the batch changes size and padding.
    joining = {1: [5, 150], 3: [131], 6: [17, 200], 9: [64]}
    batch_sizes, step = [], 0
    while not watched.finished:
        for length in joining.get(step, []):
            engine.add_request(prompt(length, length), SamplingParams(max_tokens=4 + length % 11, ignore_eos=True))
        batch_sizes.append(len(engine.step()))
        step += 1
    assert max(batch_sizes) >= 4  # it really decoded in company
    assert_same_bits(alone_rows, runner.rows[watched.request_id])
    assert watched.output_token_ids == alone.output_token_ids


def test_prefill_logits_are_the_same_bits_alone_and_in_a_prefill_batch(reference) -> None:
    x = prompt(1, 90)
    alone, alone_rows = run_alone(reference, x)
    engine, runner = recording_engine(reference, prefill_batching="compute-quota", prefill_token_budget=4096)
    others = [engine.add_request(prompt(n, n), GREEDY) for n in (7, 260)]
    watched = engine.add_request(x, GREEDY)
    assert [s.request_id for s in engine.step()] == [s.request_id for s in (*others, watched)]  # one prefill step
    while not watched.finished:
        engine.step()
    assert_same_bits(alone_rows, runner.rows[watched.request_id])


def test_a_prefix_hit_prefill_batched_with_others_matches_it_alone_and_the_full_recompute(reference) -> None:
    # A second turn on the first's cached KV (prefix hit), prefilled and decoded in company.
    first = prompt(2, 50)
    turns = []
    for company in ([], [40, 150]):
        engine, runner = recording_engine(reference, prefill_batching="compute-quota")
        history = first + engine.generate(first, GREEDY).output_token_ids + prompt(3, 12)
        for n in company:
            engine.add_request(prompt(n, n), GREEDY)
        second = engine.add_request(history, GREEDY)
        while not second.finished:
            engine.step()
        turns.append((history, second, runner.rows[second.request_id]))
    (history, alone, alone_rows), (_, batched, batched_rows) = turns
    assert alone.num_cached_tokens == batched.num_cached_tokens > 0
    assert_same_bits(alone_rows, batched_rows)
    assert batched.output_token_ids == reference.generate(history, GREEDY).output_token_ids
