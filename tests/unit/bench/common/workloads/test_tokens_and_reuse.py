"""Token synthesis from hash ids: prompts are identical exactly where their hash ids are, so the
prefix reuse a cache sees equals the trace's; and the reuse arithmetic on top of it."""

import random

import pytest

from agentserve.bench.common.workloads.reuse import HashReuse, servable, trace_reuse
from agentserve.bench.common.workloads.tokens import TokenSynth

pytestmark = pytest.mark.unit

BLOCK = 32


def _common_prefix(a, b) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _random_requests(rng: random.Random, n: int):
    """Chained hash ids the way Mooncake makes them: a request extends or branches an earlier one."""
    requests, next_id = [], 0
    for _ in range(n):
        if requests and rng.random() < 0.7:
            base = rng.choice(requests)[0]
            keep = rng.randrange(0, len(base) + 1)
            ids = list(base[:keep])
        else:
            ids = []
        for _ in range(rng.randrange(1, 6)):
            ids.append(next_id)
            next_id += 1
        length = (len(ids) - 1) * BLOCK + rng.randrange(1, BLOCK + 1)
        requests.append((tuple(ids), length))
    return requests


def test_tokens_are_identical_exactly_where_hash_ids_are():
    synth = TokenSynth()
    requests = _random_requests(random.Random(7), 60)
    prompts = [synth.hashed_prompt(ids, length, BLOCK) for ids, length in requests]
    for (ids_a, len_a), a in zip(requests, prompts):
        assert len(a) == len_a and all(5 <= t < 8192 for t in a)
        for (ids_b, len_b), b in zip(requests, prompts):
            same_blocks = _common_prefix(ids_a, ids_b)
            expected = min(same_blocks * BLOCK, len_a, len_b)
            if same_blocks < min(len(ids_a), len(ids_b)):
                # the first differing block: distinct ids give distinct tokens from its very first token
                assert _common_prefix(a, b) == expected
            else:
                assert a[:expected] == b[:expected]


def test_synthesis_is_deterministic_and_prefix_stable():
    a, b = TokenSynth(), TokenSynth()
    assert a.hashed_prompt([3, 9], 50, BLOCK) == b.hashed_prompt([3, 9], 50, BLOCK)
    assert a.message("k", 5000)[:100] == b.message("k", 100)
    assert a.message("k", 10) != a.message("other", 10)
    assert a.prefix("system", 7) == a.prefix("system", 70)[:7]
    with pytest.raises(ValueError, match="hash ids"):
        a.hashed_prompt([1], BLOCK + 1, BLOCK)


def test_hash_reuse_counts_whole_blocks_and_partial_coverage():
    reuse = HashReuse()
    assert reuse.reusable([1, 2, 3], 80, BLOCK) == 0
    reuse.observe([1, 2, 3], 70, BLOCK)  # block 3 covered for 6 of its tokens
    assert reuse.reusable([1, 2, 3, 4], 100, BLOCK) == 70
    assert reuse.reusable([1, 2, 3], 66, BLOCK) == 66
    assert reuse.reusable([1, 5], 64, BLOCK) == 32
    assert reuse.reusable([9, 2], 64, BLOCK) == 0  # chained ids: a different first block shares nothing


def test_trace_reuse_equals_the_token_level_common_prefix_with_earlier_prompts():
    synth = TokenSynth()
    requests = _random_requests(random.Random(3), 40)
    prompts = [synth.hashed_prompt(ids, length, BLOCK) for ids, length in requests]
    got = trace_reuse(requests, BLOCK)
    for i, p in enumerate(prompts):
        assert got[i] == max((_common_prefix(p, q) for q in prompts[:i]), default=0)


@pytest.mark.parametrize(
    "reusable, prompt, expected",
    [
        (0, 100, 0),
        (15, 100, 0),
        (16, 100, 16),
        (70, 100, 64),
        (100, 100, 96),
        (96, 96, 80),
        (500, 97, 96),
        (10, 0, 0),
    ],
)
def test_servable_is_whole_blocks_short_of_the_last_prompt_token(reusable, prompt, expected):
    assert servable(reusable, prompt, 16) == expected
