"""Per-request controls of a step: min_tokens holds stop tokens off, logprobs report the model's
distribution (checked against Hugging Face transformers on the same weights)."""

from __future__ import annotations

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine

pytestmark = pytest.mark.unit

PROMPT = [17, 230, 999, 41, 5, 77, 1500, 64]


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir)


def test_logprobs_are_the_models_log_softmax(engine, tiny_model_dir):
    seq = engine.generate(PROMPT, SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        logits = hf(torch.tensor([seq.token_ids[:-1]])).logits[0, len(PROMPT) - 1 :]
    expected = torch.log_softmax(logits, dim=-1)
    assert [e.token_id for e in seq.logprobs] == seq.output_token_ids
    for step, entry in enumerate(seq.logprobs):
        assert entry.logprob == pytest.approx(float(expected[step, entry.token_id]), abs=1e-3)
        values, ids = torch.topk(expected[step], 3)
        assert [t for t, _ in entry.top] == ids.tolist()
        assert [lp for _, lp in entry.top] == pytest.approx(values.tolist(), abs=1e-3)
        assert entry.top[0][0] == entry.token_id  # greedy picks the likeliest


def test_no_logprobs_unless_asked(engine):
    assert engine.generate(PROMPT, SamplingParams(max_tokens=3, ignore_eos=True)).logprobs == []
    only_token = engine.generate(PROMPT, SamplingParams(max_tokens=3, ignore_eos=True, logprobs=0)).logprobs
    assert len(only_token) == 3 and all(e.top == () for e in only_token)


def test_min_tokens_holds_a_stop_token_off_until_reached(engine):
    free = engine.generate(PROMPT, SamplingParams(max_tokens=12, ignore_eos=True)).output_token_ids
    k = next(i for i, t in enumerate(free) if i > 0 and t not in free[:i])  # a token greedy picks first at step k
    stop = free[k]
    stopped = engine.generate(PROMPT, SamplingParams(max_tokens=12, stop_token_ids=(stop,)))
    assert stopped.output_token_ids == free[: k + 1] and stopped.finish_reason == "stop"

    held = engine.generate(PROMPT, SamplingParams(max_tokens=12, stop_token_ids=(stop,), min_tokens=k + 3, logprobs=2))
    out = held.output_token_ids
    assert out[:k] == free[:k]
    # The stop token was the likeliest at step k; held off, greedy takes the runner-up.
    assert held.logprobs[k].top[0][0] == stop and out[k] == held.logprobs[k].top[1][0]
    assert stop not in out[: k + 3] and len(out) >= k + 3
    assert held.finish_reason == "length" or (out[-1] == stop and held.finish_reason == "stop")


def test_min_tokens_holds_eos_off_and_ignore_eos_gives_exact_lengths(engine):
    eos = engine.model_config.eos_token_id
    for n in (1, 4, 9):
        seq = engine.generate(PROMPT, SamplingParams(max_tokens=n, ignore_eos=True))
        assert seq.num_output_tokens == n and seq.finish_reason == "length"
    seq = engine.generate(PROMPT, SamplingParams(max_tokens=12, min_tokens=12, temperature=1.0, seed=3))
    assert seq.num_output_tokens == 12 and not set(seq.output_token_ids) & set(eos)
