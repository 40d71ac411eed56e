"""A Llama-family GGUF file as the Hugging Face model folder the engines load.

`model_folder(path)` is what every `--model` goes through: a folder is returned as it is; a `.gguf`
file is converted once into a cached folder (under `models_home()`, keyed by the file's bytes and
this converter) holding exactly what an HF checkpoint holds, so the GGUF and HF paths share one
model definition and one loader:

- `config.json` from the `llama.*` metadata (layers, widths, heads, rope base, norm epsilon,
  context; `tie_word_embeddings` when the file has no `output.weight`);
- `model.safetensors`: every tensor dequantized to float32 (Q4_0, Q4_1, Q8_0, F16, F32 and the
  other types `gguf` reads), renamed to the HF Llama names. llama.cpp's converter permutes the rows
  of `attn_q` / `attn_k` so that rope rotates adjacent pairs; the inverse permutation is applied
  here, since the engine (as HF) rotates the two halves of each head. The engine then casts to its
  own dtype at load time;
- `tokenizer.json` built from `tokenizer.ggml.*` (a byte-level BPE vocabulary, its merges, and the
  pre-tokenizer llama.cpp names in `tokenizer.ggml.pre`), `tokenizer_config.json` with the file's
  special tokens and `tokenizer.chat_template`, so the model's own template renders prompts.

Only `general.architecture == "llama"` with a `gpt2` (byte-level BPE) vocabulary is accepted; any
other file is a ValueError naming what it has.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from agentserve.model_files.tokenizer_files import build_once, models_home, write_json

GGUF_SUFFIX = ".gguf"
# Per-layer GGUF tensor names and their HF Llama counterparts.
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# llama.cpp's pre-tokenizer names -> the split regexes it applies before byte-level BPE.
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_TOKENIZER_SPLITS = {
    # Digits one by one, then GPT-2's split (llama.cpp groups these as "starcoder"-style).
    "smollm": (r"\p{N}", GPT2_SPLIT),
    "starcoder": (r"\p{N}", GPT2_SPLIT),
    "refact": (r"\p{N}", GPT2_SPLIT),
    "gpt-2": (GPT2_SPLIT,),
    "default": (GPT2_SPLIT,),
    "llama-bpe": (LLAMA3_SPLIT,),
    "llama3": (LLAMA3_SPLIT,),
}
CONTROL_TOKEN = 3  # llama.cpp's token type for special (control) tokens
USER_DEFINED_TOKEN = 4
DIGEST_BYTES = 16 << 20  # hashed from each end of the file, with its size, to key the cache


def model_folder(path: str | Path) -> Path:
    """`path` if it is a model folder; the converted folder of a `.gguf` file (built on first use)."""
    path = Path(path)
    if path.suffix.lower() != GGUF_SUFFIX:
        return path
    if not path.is_file():
        raise ValueError(f"GGUF model file {path} does not exist")
    target = models_home() / f"gguf-{path.stem}-{_digest(path)}"
    return build_once(target, "model.safetensors", lambda staging: convert(path, staging))


def convert(gguf_path: Path, out: Path) -> None:
    """Write the HF folder of `gguf_path` into `out` (see the module docstring)."""
    from gguf import GGUFReader  # imported here: only a GGUF model needs it

    reader = GGUFReader(str(gguf_path))
    meta = _metadata(reader)
    config = llama_config(meta, has_output="output.weight" in {t.name for t in reader.tensors})
    tensors = {name: tensor for name, tensor in _hf_tensors(reader, config)}
    from safetensors.numpy import save_file

    save_file(tensors, str(out / "model.safetensors"))
    write_json(out / "config.json", config)
    _write_tokenizer(meta, out)


def llama_config(meta: dict[str, Any], has_output: bool) -> dict[str, Any]:
    """The HF `config.json` of a llama GGUF's metadata; ValueError for another architecture."""
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"GGUF architecture {arch!r} is not supported; supported: llama")
    vocabulary = meta.get("tokenizer.ggml.model")
    if vocabulary != "gpt2":
        raise ValueError(f"GGUF tokenizer model {vocabulary!r} is not supported; supported: gpt2 (byte-level BPE)")
    heads = int(meta["llama.attention.head_count"])
    hidden = int(meta["llama.embedding_length"])
    # Generation stops at EOS and at the end-of-turn token, when the file names one apart.
    stops = (meta.get("tokenizer.ggml.eos_token_id"), meta.get("tokenizer.ggml.eot_token_id"))
    eos = list(dict.fromkeys(int(i) for i in stops if i is not None))
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": len(meta["tokenizer.ggml.tokens"]),
        "hidden_size": hidden,
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "head_dim": int(meta.get("llama.rope.dimension_count", hidden // heads)),
        "rms_norm_eps": float(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        "rope_theta": float(meta.get("llama.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(meta.get("llama.context_length", 4096)),
        "tie_word_embeddings": not has_output,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": eos,
        "torch_dtype": "float32",
    }


def unpermute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's `permute` of a q/k projection's rows: within each head it interleaved the
    two halves (rows 0, d/2, 1, d/2+1, ...); HF and the engine keep them as halves."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _hf_tensors(reader: Any, config: dict[str, Any]) -> Any:
    from gguf import dequantize

    for tensor in reader.tensors:
        stem, _, kind = tensor.name.rpartition(".")
        name = _hf_name(stem)
        if name is None or kind != "weight":
            raise ValueError(f"GGUF tensor {tensor.name!r} has no place in a llama model")
        weight = np.ascontiguousarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        if stem.endswith(".attn_q"):
            weight = unpermute_rope_rows(weight, config["num_attention_heads"])
        elif stem.endswith(".attn_k"):
            weight = unpermute_rope_rows(weight, config["num_key_value_heads"])
        yield f"{name}.weight", weight


def _hf_name(stem: str) -> str | None:
    if stem in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[stem]
    block, _, rest = stem.partition(".")
    layer, _, part = rest.partition(".")
    if block != "blk" or not layer.isdigit() or part not in LAYER_TENSORS:
        return None
    return f"model.layers.{int(layer)}.{LAYER_TENSORS[part]}"


def _write_tokenizer(meta: dict[str, Any], out: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    types: list[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZER_SPLITS:
        raise ValueError(f"GGUF pre-tokenizer {pre!r} is not supported; supported: {sorted(PRE_TOKENIZER_SPLITS)}")
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    splits = [pre_tokenizers.Split(Regex(split), behavior="isolated") for split in PRE_TOKENIZER_SPLITS[pre]]
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types) if kind == CONTROL_TOKEN]
    )
    tokenizer.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t, kind in zip(tokens, types) if kind == USER_DEFINED_TOKEN]
    )
    tokenizer.save(str(out / "tokenizer.json"))
    config: dict[str, Any] = {"model_max_length": int(meta.get("llama.context_length", 4096))}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        token_id = meta.get(f"tokenizer.ggml.{key}_token_id")
        if token_id is not None:
            config[name] = tokens[int(token_id)]
    if "tokenizer.chat_template" in meta:
        config["chat_template"] = meta["tokenizer.chat_template"]
    write_json(out / "tokenizer_config.json", config)


def _metadata(reader: Any) -> dict[str, Any]:
    return {name: field.contents() for name, field in reader.fields.items()}


def _digest(path: Path) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    size = path.stat().st_size
    h.update(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(DIGEST_BYTES))
        f.seek(max(0, size - DIGEST_BYTES))
        h.update(f.read(DIGEST_BYTES))
    return h.hexdigest()[:10]
