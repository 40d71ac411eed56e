"""init_model: write the embedded default model, a random-weight checkpoint in Hugging Face format.

The engine, its tests and the benchmarks need a model that exists without a download. This module
writes one from nothing but a preset name and a seed: `config.json`, `model.safetensors`, a
byte-level BPE `tokenizer.json` trained on the shipped corpus, and the tokenizer/generation
configs. Output is byte-identical for the same (preset, seed, model_type), so a model directory
can be recreated anywhere instead of being shipped, and it loads unchanged in `transformers`, which
the parity tests rely on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS, EOS, PAD, IM_START, IM_END = "<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>"
# Trained first, so they get ids 0..4 in this order.
SPECIAL_TOKENS = (BOS, EOS, PAD, IM_START, IM_END)
BOS_ID, EOS_ID, PAD_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))
# Generation stops at either: <|eos|> ends a plain completion, <|im_end|> ends a chat turn.
STOP_IDS = [EOS_ID, IM_END_ID]

# ChatML. Non-string content is rejected in the template itself so HF and our wrapper fail alike.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is not string %}"
    "{{ raise_exception('message content must be a string') }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

INIT_STD = 0.02
MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


@dataclass(frozen=True)
class ModelPreset:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool
    rope_theta: float = 500000.0
    max_position_embeddings: int = 32768
    rms_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"preset {name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        # Byte-level BPE needs all 256 byte tokens plus the specials before any merge.
        if self.vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)}, got {self.vocab_size}")


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(
        vocab_size=8192,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "small": ModelPreset(
        vocab_size=16384,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=False,
    ),
}


def get_preset(name: str) -> ModelPreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None


def init_model(out_dir: str | Path, preset: str = "tiny", seed: int = 0, model_type: str = "llama") -> Path:
    """Write a random-weight model to `out_dir` (created if needed; our files are overwritten).

    Returns the directory. Same arguments give byte-identical files on the same torch/tokenizers
    versions.
    """
    spec = get_preset(preset)
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model_type {model_type!r}; choose one of {', '.join(MODEL_TYPES)}")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)

    # The trainer never exceeds vocab_size; a corpus too small for the preset leaves spare embedding rows.
    tokenizer = train_tokenizer(spec.vocab_size)
    tokenizer.save(str(out / "tokenizer.json"), pretty=True)
    _write_json(out / "tokenizer_config.json", tokenizer_config(spec))
    _write_json(out / "special_tokens_map.json", special_tokens_map())
    _write_json(
        out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": STOP_IDS, "pad_token_id": PAD_ID}
    )
    _write_json(out / "config.json", model_config(spec, model_type))
    # save() + write_bytes rather than save_file, which creates the file 0600 whatever the umask and so
    # breaks images that build the model as one user and serve it as another.
    weights = save(init_weights(spec, model_type, seed), metadata={"format": "pt"})
    (out / "model.safetensors").write_bytes(weights)
    return out


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Byte-level BPE trained on the shipped corpus; the specials take ids 0..4.

    The trainer is deterministic: pair-count ties break on token ids and the initial alphabet is
    sorted, so neither rayon's thread count nor Rust's per-process hash seeds change the result
    (checked by hand with RAYON_RS_NUM_CPUS=1 vs 2 in separate processes; the tests repeat in-process).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_blocks(), trainer)
    return tokenizer


def _corpus_blocks() -> list[str]:
    text = resources.files("agentserve.engine").joinpath("data", "corpus.txt").read_text(encoding="utf-8")
    # Blocks keep their separator so newline/indent runs are learned as they appear in chats.
    return [block + "\n\n" for block in text.split("\n\n")]


def tokenizer_config(spec: ModelPreset) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        # HF only skips tokens it knows are special; listing the chat markers keeps its decode equal to ours.
        "additional_special_tokens": [IM_START, IM_END],
        "extra_special_tokens": [IM_START, IM_END],
        "model_max_length": spec.max_position_embeddings,
        # Decoding must be the exact inverse of encoding; HF's cleanup would drop spaces before punctuation.
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, tok in enumerate(SPECIAL_TOKENS)
        },
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": [IM_START, IM_END]}


def model_config(spec: ModelPreset, model_type: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [MODEL_TYPES[model_type]],
        "model_type": model_type,
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": spec.rms_norm_eps,
        # transformers < 5 reads rope_theta, >= 5 reads rope_parameters; both agree.
        "rope_theta": spec.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "attention_dropout": 0.0,
        "initializer_range": INIT_STD,
        "use_cache": True,
        "bos_token_id": BOS_ID,
        "eos_token_id": STOP_IDS,
        "pad_token_id": PAD_ID,
        # Same split as rope: torch_dtype before transformers 5, dtype after.
        "torch_dtype": "float32",
        "dtype": "float32",
    }
    if model_type == "llama":
        config.update(attention_bias=False, mlp_bias=False)
    else:
        config.update(use_sliding_window=False, sliding_window=None, max_window_layers=spec.num_hidden_layers)
    return config


def init_weights(spec: ModelPreset, model_type: str, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor drawn in a fixed order from one seeded generator, so the bytes depend on the seed only."""
    gen = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = INIT_STD) -> torch.Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def linear(out_features: int, in_features: int) -> torch.Tensor:
        # Fan-in scaling: each layer's update is as large as its input, so the residual stream is
        # not just the (tiny) token embedding. With 0.02 everywhere a tied-embedding model keeps
        # predicting its input token and every greedy continuation repeats one token.
        return normal(out_features, in_features, std=in_features**-0.5)

    def norm() -> torch.Tensor:
        # Not exactly 1.0, so a kernel that ignores the norm weight fails parity tests.
        return 1.0 + normal(spec.hidden_size)

    hidden, inter = spec.hidden_size, spec.intermediate_size
    q_dim = spec.num_attention_heads * spec.head_dim
    kv_dim = spec.num_key_value_heads * spec.head_dim
    weights = {"model.embed_tokens.weight": normal(spec.vocab_size, hidden)}
    for i in range(spec.num_hidden_layers):
        layer = f"model.layers.{i}"
        weights[f"{layer}.self_attn.q_proj.weight"] = linear(q_dim, hidden)
        weights[f"{layer}.self_attn.k_proj.weight"] = linear(kv_dim, hidden)
        weights[f"{layer}.self_attn.v_proj.weight"] = linear(kv_dim, hidden)
        if model_type == "qwen2":
            weights[f"{layer}.self_attn.q_proj.bias"] = normal(q_dim)
            weights[f"{layer}.self_attn.k_proj.bias"] = normal(kv_dim)
            weights[f"{layer}.self_attn.v_proj.bias"] = normal(kv_dim)
        weights[f"{layer}.self_attn.o_proj.weight"] = linear(hidden, q_dim)
        weights[f"{layer}.mlp.gate_proj.weight"] = linear(inter, hidden)
        weights[f"{layer}.mlp.up_proj.weight"] = linear(inter, hidden)
        weights[f"{layer}.mlp.down_proj.weight"] = linear(hidden, inter)
        weights[f"{layer}.input_layernorm.weight"] = norm()
        weights[f"{layer}.post_attention_layernorm.weight"] = norm()
    weights["model.norm.weight"] = norm()
    if not spec.tie_word_embeddings:
        weights["lm_head.weight"] = linear(spec.vocab_size, hidden)
    return weights


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
