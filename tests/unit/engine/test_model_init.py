from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from agentserve.engine.config import ModelConfig
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.model_init import init_model, init_weights, trained_weights_path
from agentserve.model_files.presets import PRESETS, SPECIAL_TOKENS, ModelPreset, get_preset
from agentserve.model_files.tokenizer_files import train_tokenizer

pytestmark = pytest.mark.unit

FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
}


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def expected_names(layers: int, tied: bool, qkv_bias: bool) -> set[str]:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    for i in range(layers):
        prefix = f"model.layers.{i}"
        names |= {f"{prefix}.self_attn.{p}_proj.weight" for p in "qkvo"}
        names |= {f"{prefix}.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
        names |= {f"{prefix}.input_layernorm.weight", f"{prefix}.post_attention_layernorm.weight"}
        if qkv_bias:
            names |= {f"{prefix}.self_attn.{p}_proj.bias" for p in "qkv"}
    if not tied:
        names.add("lm_head.weight")
    return names


def test_presets_match_the_documented_shapes():
    assert PRESETS["tiny"] == ModelPreset(
        vocab_size=8192,
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        max_position_embeddings=32768,
    )
    small = PRESETS["small"]
    assert (
        small.vocab_size,
        small.hidden_size,
        small.intermediate_size,
        small.num_hidden_layers,
        small.num_attention_heads,
        small.num_key_value_heads,
        small.head_dim,
        small.tie_word_embeddings,
    ) == (16384, 512, 1408, 8, 8, 4, 64, False)


def test_unknown_preset_lists_choices(tmp_path):
    with pytest.raises(ValueError, match=r"unknown preset 'huge'; choose one of tiny, small"):
        init_model(tmp_path, "huge")
    with pytest.raises(ValueError, match="unknown preset"):
        get_preset("Tiny")


def test_bad_arguments_are_rejected_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"unknown model_type 'gpt2'; choose one of llama, qwen2"):
        init_model(tmp_path / "m", model_type="gpt2")
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        init_model(tmp_path / "m", seed=-1)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a directory"):
        init_model(tmp_path / "file")
    assert not (tmp_path / "m").exists()


def test_preset_validation():
    base = dict(
        vocab_size=1024,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    with pytest.raises(ValueError, match=r"num_attention_heads \(4\) must be a multiple of num_key_value_heads \(3\)"):
        ModelPreset(**{**base, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="hidden_size must be a positive integer"):
        ModelPreset(**{**base, "hidden_size": 0})
    with pytest.raises(ValueError, match="vocab_size must be at least 261"):
        ModelPreset(**{**base, "vocab_size": 260})


def test_writes_exactly_the_hf_files(tiny_model_dir):
    assert {p.name for p in tiny_model_dir.iterdir()} == FILES
    # Weights are as readable as the JSON files (safetensors' save_file would make them 0600).
    modes = {(tiny_model_dir / name).stat().st_mode for name in FILES}
    assert len(modes) == 1


def test_config_is_a_llama_config_our_engine_parses(tiny_model_dir):
    raw = json.loads((tiny_model_dir / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLM"]
    assert raw["attention_bias"] is False
    assert raw["torch_dtype"] == "float32"
    cfg = ModelConfig.from_file(tiny_model_dir / "config.json")
    assert (
        cfg.model_type,
        cfg.vocab_size,
        cfg.hidden_size,
        cfg.intermediate_size,
        cfg.num_hidden_layers,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    ) == ("llama", 8192, 256, 704, 4, 4, 2, 64)
    assert cfg.rope_theta == 500000.0
    assert cfg.rope_scaling is None
    assert cfg.max_position_embeddings == 32768
    assert cfg.tie_word_embeddings is True
    assert cfg.attention_bias is False
    assert cfg.bos_token_id == 0
    assert cfg.eos_token_id == (1, 4)
    generation = json.loads((tiny_model_dir / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 0, "eos_token_id": [1, 4], "pad_token_id": 2}


def test_weights_have_hf_names_shapes_and_metadata(tiny_model_dir):
    with safe_open(tiny_model_dir / "model.safetensors", framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert set(f.keys()) == expected_names(4, tied=True, qkv_bias=False)
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [8192, 256]
        assert f.get_slice("model.layers.0.self_attn.q_proj.weight").get_shape() == [256, 256]
        assert f.get_slice("model.layers.3.self_attn.k_proj.weight").get_shape() == [128, 256]
        assert f.get_slice("model.layers.3.self_attn.o_proj.weight").get_shape() == [256, 256]
        assert f.get_slice("model.layers.1.mlp.down_proj.weight").get_shape() == [256, 704]
        embed = f.get_tensor("model.embed_tokens.weight")
        norm = f.get_tensor("model.norm.weight")
    assert embed.dtype == torch.float32
    assert abs(embed.std().item() - 0.02) < 0.001
    assert abs(norm.mean().item() - 1.0) < 0.01


def test_small_preset_is_untied():
    weights = init_weights(PRESETS["small"], "llama", seed=0)
    assert set(weights) == expected_names(8, tied=False, qkv_bias=False)
    assert weights["lm_head.weight"].shape == (16384, 512)
    assert not torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])


def test_same_seed_is_byte_identical_and_other_seed_changes_only_weights(tiny_model_dir, tmp_path):
    assert digests(init_model(tmp_path / "again", "tiny", seed=0)) == digests(tiny_model_dir)
    other = digests(init_model(tmp_path / "seed1", "tiny", seed=1))
    base = digests(tiny_model_dir)
    assert [name for name in FILES if other[name] != base[name]] == ["model.safetensors"]


def test_tokenizer_training_is_deterministic_and_fills_the_tiny_vocab():
    first, second = train_tokenizer(8192), train_tokenizer(8192)
    assert first.to_str() == second.to_str()
    assert first.get_vocab_size() == 8192


def test_special_tokens_take_ids_0_to_4(tiny_model_dir):
    raw = json.loads((tiny_model_dir / "tokenizer.json").read_text())
    assert [(t["id"], t["content"], t["special"]) for t in raw["added_tokens"]] == [
        (i, tok, True) for i, tok in enumerate(SPECIAL_TOKENS)
    ]
    assert SPECIAL_TOKENS == ("<|bos|>", "<|eos|>", "<|pad|>", "<|im_start|>", "<|im_end|>")


def test_loads_in_transformers_without_missing_or_unexpected_keys(tiny_model_dir):
    transformers = pytest.importorskip("transformers")
    model, info = transformers.LlamaForCausalLM.from_pretrained(tiny_model_dir, output_loading_info=True)
    assert {k: set(v) if k != "error_msgs" else v for k, v in info.items()} == {
        "missing_keys": set(),
        "unexpected_keys": set(),
        "mismatched_keys": set(),
        "error_msgs": [],
    }
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert model.config.rope_parameters["rope_theta"] == 500000.0
    with torch.no_grad():
        logits = model(torch.tensor([[0, 10, 20, 30]])).logits
    assert logits.shape == (1, 4, 8192)
    assert torch.isfinite(logits).all()


def test_qwen2_variant_has_random_qkv_biases_and_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = init_model(tmp_path, "tiny", seed=0, model_type="qwen2")
    raw = json.loads((folder / "config.json").read_text())
    assert (raw["architectures"], raw["model_type"]) == (["Qwen2ForCausalLM"], "qwen2")
    assert ModelConfig.from_file(folder / "config.json").attention_bias is True
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        assert set(f.keys()) == expected_names(4, tied=True, qkv_bias=True)
        bias = f.get_tensor("model.layers.0.self_attn.k_proj.bias")
    assert bias.shape == (128,)
    assert bias.abs().sum() > 0
    model, info = transformers.Qwen2ForCausalLM.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert torch.equal(model.model.layers[0].self_attn.k_proj.bias.detach(), bias)


def test_default_weights_are_the_shipped_trained_ones_in_fp32(tmp_path):
    folder = init_model(tmp_path / "trained")
    with safe_open(trained_weights_path("tiny"), framework="pt") as f:
        shipped = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - safe_open is not a dict
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        assert f.metadata() == {"format": "pt"}
        written = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    assert set(written) == set(shipped) == expected_names(4, tied=True, qkv_bias=False)
    assert {t.dtype for t in shipped.values()} == {torch.float16}
    assert all(written[k].dtype == torch.float32 and torch.equal(written[k], shipped[k].float()) for k in shipped)


def test_only_the_tiny_llama_has_trained_weights(tmp_path):
    with pytest.raises(
        ValueError, match=r"trained weights ship for the llama tiny and mixtral tiny presets only, not llama 'small'"
    ):
        init_model(tmp_path / "m", "small")
    with pytest.raises(ValueError, match=r"not qwen2 'tiny'; pass a seed for random weights"):
        init_model(tmp_path / "m", model_type="qwen2")
    with pytest.raises(ValueError, match="no trained weights ship for preset 'small'"):
        trained_weights_path("small")
    assert not (tmp_path / "m").exists()


def test_default_model_is_the_trained_one_and_random_ones_are_kept_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSERVE_HOME", str(tmp_path))
    trained, random = ensure_default_model(), ensure_default_model(seed=0)
    assert trained.name.startswith("tiny-trained-") and random.name.startswith("tiny-seed0-")
    assert trained.parent == random.parent == tmp_path / "models"
    assert digests(trained) == digests(init_model(tmp_path / "t"))
    assert digests(random) == digests(init_model(tmp_path / "r", seed=0))
