"""`bench perplexity`: the shipped weights beat random ones on text training never saw."""

from __future__ import annotations

import math

import pytest

from agentserve.bench.micro import perplexity
from agentserve.engine.default_model import ensure_default_model
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import split_corpus, token_stream

pytestmark = pytest.mark.unit

# The shipped weights score 7.0 on this slice (random ones ~8700, a uniform guess 8192); the bound
# leaves room for float differences across CPUs and torch builds while staying 400x below random.
BOUND = 20.0


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(ensure_default_model())


def test_windows_cut_the_held_out_stream_in_order(tokenizer: Tokenizer) -> None:
    stream = token_stream(tokenizer, split_corpus().held_out)
    windows = perplexity.held_out_windows(tokenizer, 256)
    assert [t for w in windows for t in w] == stream[: sum(map(len, windows))]
    assert all(len(w) == 256 for w in windows[:-1]) and 2 <= len(windows[-1]) <= 256
    sliced = perplexity.held_out_windows(tokenizer, 100, max_tokens=250)
    assert sliced == [stream[:100], stream[100:200], stream[200:250]]
    with pytest.raises(ValueError, match="seq_len must be at least 2, got 1"):
        perplexity.held_out_windows(tokenizer, 1)


def test_trained_perplexity_is_far_below_random_on_a_held_out_slice() -> None:
    report = perplexity.run(seq_len=128, max_tokens=512)
    assert report["regime"]["scored_tokens"] == 4 * 127 and report["regime"]["windows"] == 4
    trained, random = report["trained"]["perplexity"], report["random_seed0"]["perplexity"]
    assert math.isclose(report["trained_over_random"], trained / random, abs_tol=1e-6)
    assert trained <= 0.5 * random  # the bar
    assert trained <= BOUND
