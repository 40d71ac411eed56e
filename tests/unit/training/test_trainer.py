"""Training is deterministic, follows its schedule, and writes weights `model init` can ship."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from agentserve.engine.model_init import init_weights
from agentserve.model_files.presets import get_preset
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.training.agent_transcripts import agent_transcripts
from agentserve.training.corpus import split_corpus, token_stream, transcript_tokens
from agentserve.training.trainer import TrainConfig, save_weights, train, training_stream, windows

pytestmark = pytest.mark.unit

SHORT = TrainConfig(steps=2, batch_size=1, seq_len=32, warmup_steps=1)


def test_lr_warms_up_linearly_then_decays_on_a_cosine_to_min_lr() -> None:
    config = TrainConfig(steps=11, warmup_steps=2, lr=1e-3, min_lr=1e-4)
    assert [config.lr_at(s) for s in (0, 1)] == [5e-4, 1e-3]
    assert config.lr_at(2) == pytest.approx(1e-3)
    assert config.lr_at(6) == pytest.approx(5.5e-4)  # halfway down the cosine
    assert config.lr_at(10) == pytest.approx(1e-4)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"steps": 0}, "steps must be positive, got 0"),
        ({"threads": 0}, "threads must be positive, got 0"),
        ({"min_lr": 1e-2}, "need 0 < min_lr <= lr"),
        ({"warmup_steps": 1200}, r"warmup_steps must be in \[0, steps\)"),
        ({"data_seed": -1}, "seeds must be non-negative"),
        ({"preset": "huge"}, "unknown preset 'huge'"),
        ({"init_from": "mixtral"}, "init_from must be seed, trained or agent, got 'mixtral'"),
        ({"agent_transcripts": -1}, "agent_transcripts must be >= 0, got -1"),
    ],
)
def test_bad_configs_are_rejected(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)


def test_agent_transcripts_join_the_corpus_samples_in_a_seeded_order() -> None:
    tokenizer = Tokenizer.from_dir(ensure_default_tokenizer())
    corpus = token_stream(tokenizer, split_corpus().train)
    assert training_stream(tokenizer, TrainConfig()) == corpus
    config = TrainConfig(agent_transcripts=3)
    mixed = training_stream(tokenizer, config)
    assert mixed == training_stream(tokenizer, config)
    transcripts = [transcript_tokens(tokenizer, t) for t in agent_transcripts(3, config.data_seed)]
    assert len(mixed) == len(corpus) + sum(map(len, transcripts))
    assert mixed != corpus[: len(mixed)] and sorted(mixed) == sorted(corpus + [i for t in transcripts for i in t])


def test_windows_are_shuffled_slices_with_a_fresh_offset_per_pass() -> None:
    stream = torch.arange(100)
    gen = torch.Generator().manual_seed(0)
    it = windows(stream, 10, gen)
    first_pass = [next(it) for _ in range((100 - 1) // 10)]
    for w in first_pass:
        assert w.tolist() == list(range(int(w[0]), int(w[0]) + 11))
    starts = sorted(int(w[0]) for w in first_pass)
    offset = starts[0]
    assert offset < 10 and starts == list(range(offset, offset + 10 * len(starts), 10))


def test_same_config_gives_the_same_weights_and_training_changes_them() -> None:
    threads = torch.get_num_threads()
    first, second = train(SHORT, log=lambda _: None), train(SHORT, log=lambda _: None)
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    assert first.losses == second.losses and len(first.losses) == 2
    assert all(torch.equal(first.weights[k], second.weights[k]) for k in first.weights)
    start = init_weights(get_preset("tiny"), "llama", SHORT.init_seed)
    assert set(start) == set(first.weights)
    assert all(not torch.equal(start[k], first.weights[k]) for k in start)


def test_saved_weights_are_fp16_and_equal_weights_give_equal_bytes(tmp_path) -> None:
    weights = init_weights(get_preset("tiny"), "llama", 0)
    path = save_weights(weights, tmp_path / "w" / "tiny.safetensors")
    with safe_open(path, framework="pt") as f:
        assert set(f.keys()) == set(weights)
        assert f.metadata() == {"format": "pt"}
        embed = f.get_tensor("model.embed_tokens.weight")
    assert embed.dtype == torch.float16
    assert torch.equal(embed, weights["model.embed_tokens.weight"].half())
    again = {name: t.clone() for name, t in reversed(weights.items())}
    assert save_weights(again, tmp_path / "again.safetensors").read_bytes() == path.read_bytes()
