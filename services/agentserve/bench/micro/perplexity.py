"""`agentserve bench perplexity`: held-out perplexity of the trained default model vs random weights.

Both models run on the engine's own loader and forward pass in fp32, so what is measured is what
serves. The baseline is the seed-`random_seed` random model, the weights training started from.
The text is the corpus blocks training never saw (`training.corpus.split_corpus`), rendered as in
training, concatenated and cut into windows of `seq_len` tokens; each window is scored from its
own start (no context carried over), so

    perplexity = exp(sum of next-token NLL / scored tokens),  scored tokens = sum(len(window) - 1).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model
from agentserve.engine.model import CausalLM
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import split_corpus, token_stream

BLOCK_SIZE = 16


def held_out_windows(tokenizer: Tokenizer, seq_len: int, max_tokens: int | None = None) -> list[list[int]]:
    """The held-out token stream (its first `max_tokens`, if given) in windows of `seq_len`."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    if max_tokens is not None and max_tokens < 2:
        raise ValueError(f"max_tokens must be at least 2, got {max_tokens}")
    stream = token_stream(tokenizer, split_corpus().held_out)[:max_tokens]
    windows = [stream[i : i + seq_len] for i in range(0, len(stream), seq_len)]
    return [w for w in windows if len(w) >= 2]


def window_nll(model: CausalLM, tokens: list[int]) -> float:
    """Sum of the next-token negative log-likelihoods of `tokens[1:]`, one prefill from position 0."""
    n = len(tokens)
    pool = KVPool(model.config, num_slots=-(-n // BLOCK_SIZE), block_size=BLOCK_SIZE, dtype=torch.float32)
    meta = PrefillMetadata.build(list(range(pool.num_slots)), BLOCK_SIZE, 0, n)
    ids = torch.tensor(tokens)
    logits = model(ids, torch.arange(n), pool, meta)
    return F.cross_entropy(logits[:-1], ids[1:], reduction="sum").item()


def perplexity(model_dir: Path, windows: list[list[int]]) -> dict:
    model, fingerprint = load_model(model_dir, "fp32")
    nll = sum(window_nll(model, w) for w in windows)
    scored = sum(len(w) - 1 for w in windows)
    return {
        "model_dir": str(model_dir),
        "fingerprint": fingerprint,
        "mean_nll": round(nll / scored, 4),
        "perplexity": round(math.exp(nll / scored), 2),
    }


def run(seq_len: int = 256, max_tokens: int | None = None, random_seed: int = 0) -> dict:
    trained_dir = ensure_default_model()
    random_dir = ensure_default_model(seed=random_seed)
    windows = held_out_windows(Tokenizer.from_dir(trained_dir), seq_len, max_tokens)
    trained = perplexity(trained_dir, windows)
    random = perplexity(random_dir, windows)
    return {
        "regime": {
            "text": "held-out corpus blocks (never trained on), rendered as in training",
            "held_out_blocks": len(split_corpus().held_out),
            "scored_tokens": sum(len(w) - 1 for w in windows),
            "seq_len": seq_len,
            "windows": len(windows),
            "dtype": "fp32",
        },
        "trained": trained,
        f"random_seed{random_seed}": random,
        "trained_over_random": round(trained["perplexity"] / random["perplexity"], 6),
    }
