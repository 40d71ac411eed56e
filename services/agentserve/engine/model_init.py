"""init_model: write the embedded default model, a random-weight checkpoint in Hugging Face format.

The engine, its tests and the benchmarks need a model that exists without a download. This module
writes one from nothing but a preset name and a seed: `config.json`, `model.safetensors`, a
byte-level BPE `tokenizer.json` trained on the shipped corpus, and the tokenizer/generation
configs. Output is byte-identical for the same (preset, seed, model_type), so a model directory
can be recreated anywhere instead of being shipped, and it loads unchanged in `transformers`, which
the parity tests rely on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save

from agentserve.model_files.presets import BOS_ID, PAD_ID, STOP_IDS, ModelPreset, get_preset
from agentserve.model_files.tokenizer_files import write_json, write_tokenizer_files

INIT_STD = 0.02
MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


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

    write_tokenizer_files(out, spec)
    write_json(out / "config.json", model_config(spec, model_type))
    # save() + write_bytes rather than save_file, which creates the file 0600 whatever the umask and so
    # breaks images that build the model as one user and serve it as another.
    weights = save(init_weights(spec, model_type, seed), metadata={"format": "pt"})
    (out / "model.safetensors").write_bytes(weights)
    return out


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
