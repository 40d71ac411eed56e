"""init_model: write the embedded default model, a checkpoint in Hugging Face format.

The engine, its tests and the benchmarks need a model that exists without a download. This module
writes one from nothing but a preset name: `config.json`, `model.safetensors`, a byte-level BPE
`tokenizer.json` trained on the shipped corpus, and the tokenizer/generation configs. The weights
are either the trained ones shipped with the package (`agentserve model train` made them) or
random ones drawn from a seed. Output is byte-identical for the same arguments, so a model
directory can be recreated anywhere instead of being copied, and it loads unchanged in
`transformers`, which the parity tests rely on.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, save

from agentserve.model_files.presets import (
    AGENT_WEIGHTS,
    BOS_ID,
    PAD_ID,
    STOP_IDS,
    TRAINED_MOE_WEIGHTS,
    TRAINED_WEIGHTS,
    ModelPreset,
    get_preset,
)
from agentserve.model_files.tokenizer_files import write_json, write_tokenizer_files

INIT_STD = 0.02
MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "mixtral": "MixtralForCausalLM"}
# The mixtral variant of a preset: its dense MLP becomes MOE_EXPERTS SwiGLU experts of a quarter
# of its width, each token routed to MOE_TOP_K of them (half the dense MLP's compute per token).
MOE_EXPERTS = 8
MOE_TOP_K = 2
MOE_WIDTH_DIVISOR = 4


def init_model(
    out_dir: str | Path, preset: str = "tiny", seed: int | None = None, model_type: str = "llama", agent: bool = False
) -> Path:
    """Write a model to `out_dir` (created if needed; our files are overwritten); returns the directory.

    `seed=None` writes the trained weights shipped with the package (presets in `TRAINED_WEIGHTS`,
    llama only; with `agent`, those in `AGENT_WEIGHTS`); an integer writes random weights drawn
    from that seed. Same arguments give byte-identical files on the same torch/tokenizers versions.
    """
    spec = get_preset(preset)
    if model_type not in MODEL_TYPES:
        raise ValueError(f"unknown model_type {model_type!r}; choose one of {', '.join(MODEL_TYPES)}")
    if agent:
        if seed is not None or model_type != "llama":
            raise ValueError("agent weights are trained llama weights: pass no seed and model_type llama")
        return _write_model(out_dir, spec, model_type, trained_weights(preset, agent=True))
    if seed is None and preset not in shipped_weights(model_type):
        raise ValueError(
            f"trained weights ship for the llama {', '.join(TRAINED_WEIGHTS)} and mixtral "
            f"{', '.join(TRAINED_MOE_WEIGHTS)} presets only, not {model_type} {preset!r}; "
            "pass a seed for random weights"
        )
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    tensors = trained_weights(preset, model_type) if seed is None else init_weights(spec, model_type, seed)
    return _write_model(out_dir, spec, model_type, tensors)


def _write_model(out_dir: str | Path, spec: ModelPreset, model_type: str, tensors: dict[str, torch.Tensor]) -> Path:
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)

    write_tokenizer_files(out, spec)
    write_json(out / "config.json", model_config(spec, model_type))
    # save() + write_bytes rather than save_file, which creates the file 0600 whatever the umask and so
    # breaks images that build the model as one user and serve it as another.
    (out / "model.safetensors").write_bytes(save(tensors, metadata={"format": "pt"}))
    return out


def shipped_weights(model_type: str) -> dict[str, str]:
    """The trained weights files that ship for `model_type`, by preset."""
    return {"llama": TRAINED_WEIGHTS, "mixtral": TRAINED_MOE_WEIGHTS}.get(model_type, {})


def trained_weights_path(preset: str, model_type: str = "llama", agent: bool = False) -> Path:
    """The shipped fp16 weights of `preset`'s `model_type` (a key of `shipped_weights`), or with
    `agent` its agent weights (`AGENT_WEIGHTS`)."""
    shipped = AGENT_WEIGHTS if agent else shipped_weights(model_type)
    if preset not in shipped:
        raise ValueError(
            f"no trained weights ship for preset {preset!r}; presets with them: {', '.join(shipped) or 'none'}"
        )
    return Path(str(resources.files("agentserve.model_files").joinpath("data", shipped[preset])))


def trained_weights(preset: str, model_type: str = "llama", agent: bool = False) -> dict[str, torch.Tensor]:
    """The shipped weights (with `agent`, the agent weights) in fp32, as the random ones are: the
    model folder's dtype does not depend on where its weights came from (fp16 -> fp32 is exact)."""
    return _load_fp32(trained_weights_path(preset, model_type, agent))


def _load_fp32(path: Path) -> dict[str, torch.Tensor]:
    shipped = load(path.read_bytes())
    return {name: shipped[name].float() for name in sorted(shipped)}


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
    elif model_type == "mixtral":
        config.update(
            intermediate_size=spec.intermediate_size // MOE_WIDTH_DIVISOR,  # Mixtral's name for an expert's width
            num_local_experts=MOE_EXPERTS,
            num_experts_per_tok=MOE_TOP_K,
            sliding_window=None,
            router_aux_loss_coef=0.01,
            output_router_logits=False,
        )
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
        if model_type == "mixtral":
            width = inter // MOE_WIDTH_DIVISOR
            weights[f"{layer}.block_sparse_moe.gate.weight"] = linear(MOE_EXPERTS, hidden)
            for e in range(MOE_EXPERTS):
                expert = f"{layer}.block_sparse_moe.experts.{e}"
                weights[f"{expert}.w1.weight"] = linear(width, hidden)
                weights[f"{expert}.w3.weight"] = linear(width, hidden)
                weights[f"{expert}.w2.weight"] = linear(hidden, width)
        else:
            weights[f"{layer}.mlp.gate_proj.weight"] = linear(inter, hidden)
            weights[f"{layer}.mlp.up_proj.weight"] = linear(inter, hidden)
            weights[f"{layer}.mlp.down_proj.weight"] = linear(hidden, inter)
        weights[f"{layer}.input_layernorm.weight"] = norm()
        weights[f"{layer}.post_attention_layernorm.weight"] = norm()
    weights["model.norm.weight"] = norm()
    if not spec.tie_word_embeddings:
        weights["lm_head.weight"] = linear(spec.vocab_size, hidden)
    return weights
