"""A Llama GGUF file as the model folder the engines load: the tiny model written as GGUF the way
llama.cpp's converter writes it (q/k rows permuted for its rope, weights in each supported type),
then converted back: the exact weights, the same logits, the same tokenizer and chat template."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as GGMLType
from safetensors.numpy import load_file

from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model
from agentserve.model_files.gguf_folder import llama_config, model_folder, unpermute_rope_rows
from agentserve.model_files.tokenizer import Tokenizer

pytestmark = pytest.mark.unit

HF_NAMES = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's `permute` of q/k rows (pairs interleaved for its rope)."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def write_gguf(model_dir: Path, path: Path, matrix_type: GGMLType) -> dict[str, np.ndarray]:
    """The HF `model_dir` as a GGUF file with every weight matrix in `matrix_type`; returns each HF
    tensor as that type stores it (quantized then dequantized), the weights the engine must load."""
    config = json.loads((model_dir / "config.json").read_text())
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_dimension_count(config["head_dim"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    vocab = sorted(spec["model"]["vocab"], key=spec["model"]["vocab"].get)
    special = {t["content"] for t in spec["added_tokens"] if t["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(vocab)
    writer.add_token_types([3 if t in special else 1 for t in vocab])
    writer.add_token_merges([" ".join(m) for m in spec["model"]["merges"]])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_eot_token_id(4)
    writer.add_chat_template(json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"])
    stored = {}
    for name, weight in load_file(str(next(model_dir.glob("*.safetensors")))).items():
        kept = (
            gguf.quants.dequantize(gguf.quants.quantize(weight, matrix_type), matrix_type)
            if weight.ndim == 2
            else weight
        )
        stored[name] = kept
        if name.endswith("q_proj.weight"):
            weight = llama_cpp_permute(weight, config["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            weight = llama_cpp_permute(weight, config["num_key_value_heads"])
        if weight.ndim == 2:
            writer.add_tensor(_gguf_name(name), gguf.quants.quantize(weight, matrix_type), raw_dtype=matrix_type)
        else:
            writer.add_tensor(_gguf_name(name), weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored


def _gguf_name(hf: str) -> str:
    stem = hf.removesuffix(".weight")
    if stem == "model.embed_tokens":
        return "token_embd.weight"
    if stem == "model.norm":
        return "output_norm.weight"
    _, _, layer, part = stem.split(".", 3)
    return f"blk.{layer}.{HF_NAMES[part]}.weight"


def _logits(model, token_ids: list[int]) -> torch.Tensor:
    pool = KVPool(model.config, num_slots=len(token_ids) // 16 + 1, block_size=16, dtype=torch.float32)
    meta = PrefillMetadata.build(list(range(pool.num_slots)), 16, 0, len(token_ids))
    with torch.no_grad():
        return model(torch.tensor(token_ids), torch.arange(len(token_ids)), pool, meta)


@pytest.fixture
def models_home(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSERVE_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


@pytest.mark.parametrize("matrix_type", [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1])
def test_each_type_loads_as_the_weights_it_stores(tiny_model_dir, tmp_path, models_home, matrix_type):
    stored = write_gguf(tiny_model_dir, tmp_path / "tiny.gguf", matrix_type)
    folder = model_folder(tmp_path / "tiny.gguf")
    assert folder.parent == models_home and model_folder(tmp_path / "tiny.gguf") == folder  # converted once
    model, _ = load_model(tmp_path / "tiny.gguf")
    params = dict(model.named_parameters())
    assert set(params) == set(stored)
    for name, weight in stored.items():
        assert torch.equal(params[name].detach(), torch.from_numpy(weight)), name


def test_an_f32_gguf_gives_the_hf_folders_logits_tokens_and_template(tiny_model_dir, tmp_path, models_home):
    write_gguf(tiny_model_dir, tmp_path / "tiny.gguf", GGMLType.F32)
    ours, _ = load_model(tmp_path / "tiny.gguf")
    reference, _ = load_model(tiny_model_dir)
    tokens = torch.randint(0, 8192, (200,), generator=torch.Generator().manual_seed(7)).tolist()
    assert (_logits(ours, tokens) - _logits(reference, tokens)).abs().max().item() == 0.0
    converted, original = Tokenizer.from_dir(tmp_path / "tiny.gguf"), Tokenizer.from_dir(tiny_model_dir)
    text = "Hello, world! 12345 tokens\n\n  spaced <|im_end|> café"
    assert converted.encode(text) == original.encode(text)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    assert converted.apply_chat_template(messages) == original.apply_chat_template(messages)
    assert (converted.bos_token_id, converted.eos_token_ids) == (0, (1, 4))


def test_rope_rows_unpermute_exactly_what_llama_cpp_permuted():
    weight = np.arange(12 * 3, dtype=np.float32).reshape(12, 3)
    assert np.array_equal(unpermute_rope_rows(llama_cpp_permute(weight, 2), 2), weight)
    # One head of 4 rows: llama.cpp interleaves the halves (0, 2, 1, 3).
    assert unpermute_rope_rows(np.array([[0.0], [2.0], [1.0], [3.0]]), 1).ravel().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"general.architecture": "qwen2"}, "GGUF architecture 'qwen2' is not supported; supported: llama"),
        (
            {"general.architecture": "llama", "tokenizer.ggml.model": "llama"},
            "GGUF tokenizer model 'llama' is not supported; supported: gpt2",
        ),
    ],
)
def test_other_architectures_and_vocabularies_are_refused_by_name(meta, message):
    with pytest.raises(ValueError, match=message):
        llama_config(meta, has_output=False)


def test_a_missing_gguf_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="GGUF model file .*missing.gguf does not exist"):
        model_folder(tmp_path / "missing.gguf")
    assert model_folder(tmp_path) == tmp_path  # a folder is itself
