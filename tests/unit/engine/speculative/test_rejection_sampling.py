"""Speculative sampling keeps the target's distribution: chi-square tests over seeded samples.

Each test draws a fixed number of samples from fixed seeds (so it is deterministic, never flaky)
and compares the counts with the target distribution by Pearson's chi-square; the statistic must
stay below the 0.999 quantile of the chi-square distribution with (cells - 1) degrees of freedom
(`CHI2_999`, from the standard tables): a correct sampler fails at most one seed choice in 1000.
"""

from __future__ import annotations

import pytest
import torch

from agentserve.contracts import SamplingParams
from agentserve.engine.config import ModelConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model import CausalLM
from agentserve.engine.sampling import distribution, sample
from agentserve.engine.speculative.acceptance import verify_token
from agentserve.engine.speculative.config import SpeculativeConfig

pytestmark = pytest.mark.unit

# The 0.999 quantile of chi-square with df = 1 .. 7 degrees of freedom.
CHI2_999 = {1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}
VOCAB = 6
LOGITS = torch.tensor([1.5, 0.2, -0.7, 0.9, 0.0, -2.0])


def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """Pearson's statistic and its degrees of freedom; cells expecting < 5 are pooled into one.
    A cell of probability 0 must be empty and is left out."""
    impossible = probs == 0
    assert counts[impossible].sum() == 0, f"impossible tokens drawn: {counts.tolist()}"
    counts, probs = counts[~impossible], probs[~impossible]
    n = float(counts.sum())
    expected = probs.double() * n
    small = expected < 5
    obs, exp = counts[~small].double(), expected[~small]
    if small.any():
        obs = torch.cat([obs, counts[small].double().sum()[None]])
        exp = torch.cat([exp, expected[small].sum()[None]])
    return float(((obs - exp) ** 2 / exp).sum()), len(exp) - 1


def assert_distributed_as(counts: torch.Tensor, probs: torch.Tensor) -> None:
    stat, df = chi_square(counts, probs)
    assert stat < CHI2_999[df], f"chi-square {stat:.2f} over {df} df; counts {counts.tolist()}, p {probs.tolist()}"


def _verified_counts(params: SamplingParams, q: torch.Tensor | None, draft: int, samples: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1234)
    counts = torch.zeros(VOCAB, dtype=torch.long)
    for _ in range(samples):
        token = draft if q is None else int(torch.multinomial(q, 1, generator=gen))
        counts[verify_token(LOGITS, token, q, params, gen)[0]] += 1
    return counts


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.8)])
def test_a_deterministic_draft_keeps_the_target_distribution(params):
    for draft in (0, 2):  # the target's likeliest token and an unlikely one
        counts = _verified_counts(params, None, draft, 6000)
        assert_distributed_as(counts, distribution(LOGITS, params))


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.8)])
def test_a_sampled_draft_keeps_the_target_distribution(params):
    q = torch.softmax(torch.tensor([-1.0, 1.0, 0.5, 0.0, 1.2, 0.3]), dim=-1)  # far from the target
    counts = _verified_counts(params, q, -1, 6000)
    assert_distributed_as(counts, distribution(LOGITS, params))


def test_distribution_is_what_sample_draws_from():
    params = SamplingParams(temperature=0.7, top_p=0.8)
    gen = torch.Generator().manual_seed(7)
    counts = torch.bincount(torch.tensor([sample(LOGITS, params, gen) for _ in range(6000)]), minlength=VOCAB)
    probs = distribution(LOGITS, params)
    assert_distributed_as(counts, probs)  # top-p's dropped tokens (probability 0) never drawn
    assert (probs == 0).sum() > 0


def test_greedy_verification_is_the_argmax():
    params = SamplingParams()
    assert verify_token(LOGITS, 0, None, params, None) == (0, True)
    assert verify_token(LOGITS, 3, None, params, None) == (0, False)


# ---- end to end: the engine's speculative decode on a model with an 8-token vocabulary ----------

E2E_VOCAB = 8
PROMPT = [*range(E2E_VOCAB), *range(E2E_VOCAB), 0, 1, 2]  # every token recurs: the 1-gram lookup always drafts
E2E_SAMPLES = 600


@pytest.fixture(scope="module")
def small_vocab_model() -> CausalLM:
    torch.manual_seed(0)
    config = ModelConfig(
        model_type="llama",
        vocab_size=E2E_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
    )
    model = CausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked, unequal next-token distributions
    model.rebuild_derived()
    return model.eval()


def _next_token_probs(engine: LLMEngine, context: list[int]) -> torch.Tensor:
    seq = engine.generate(context, SamplingParams(max_tokens=1, logprobs=E2E_VOCAB))
    probs = torch.zeros(E2E_VOCAB, dtype=torch.float64)
    for token, logprob in seq.logprobs[0].top:
        probs[token] = torch.tensor(logprob, dtype=torch.float64).exp()
    return probs


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_engine_samples_keep_the_targets_joint_distribution(small_vocab_model, method):
    """The second and third output tokens come from verified drafts (the first from the prefill):
    their marginals under speculation equal the target's, computed exactly from its logits."""
    plain = LLMEngine(small_vocab_model, "tiny-vocab", EngineConfig(prefix_cache=False))
    first = _next_token_probs(plain, PROMPT)
    second_given = [_next_token_probs(plain, [*PROMPT, a]) for a in range(E2E_VOCAB)]
    second = sum(first[a] * second_given[a] for a in range(E2E_VOCAB))
    third = sum(
        first[a] * second_given[a][b] * _next_token_probs(plain, [*PROMPT, a, b])
        for a in range(E2E_VOCAB)
        for b in range(E2E_VOCAB)
        if first[a] * second_given[a][b] > 1e-6
    )
    config = EngineConfig(prefix_cache=False, speculative=SpeculativeConfig(method, k=3, ngram=1, draft_layers=1))
    engine = LLMEngine(small_vocab_model, "tiny-vocab", config)
    counts = torch.zeros(2, E2E_VOCAB, dtype=torch.long)
    batch = 100
    for start in range(0, E2E_SAMPLES, batch):  # in batches, as the engine serves them
        seqs = [
            engine.add_request(PROMPT, SamplingParams(max_tokens=3, temperature=1.0, seed=seed, ignore_eos=True))
            for seed in range(start, start + batch)
        ]
        while engine.has_unfinished():
            engine.step()
        for seq in seqs:
            counts[0, seq.output_token_ids[1]] += 1
            counts[1, seq.output_token_ids[2]] += 1
    assert engine.speculator.stats.accepted > 0 and engine.speculator.stats.drafted > engine.speculator.stats.accepted
    assert_distributed_as(counts[0], second)
    assert_distributed_as(counts[1], third)
