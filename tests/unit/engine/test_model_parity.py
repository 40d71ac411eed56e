"""Logits and greedy parity with Hugging Face transformers on the same random weights."""

from __future__ import annotations

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.device import place_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model
from tests.support.device import TEST_DEVICE

pytestmark = pytest.mark.unit

BASE = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
)

VARIANTS = {
    "llama-tied": ("llama", dict(tie_word_embeddings=True, rope_theta=10000.0)),
    "llama-untied-llama3-rope": (
        "llama",
        dict(
            tie_word_embeddings=False,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 256,
            },
        ),
    ),
    "qwen2": ("qwen2", dict(tie_word_embeddings=False, rope_theta=1000000.0)),
}


def _build_hf(kind: str, extra: dict, out_dir, shard: bool = False):
    torch.manual_seed(1234)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**BASE, **extra))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**BASE, **extra))
    with torch.no_grad():  # HF zero-inits biases; make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.02)
    model.eval()
    model.save_pretrained(out_dir, max_shard_size="100KB" if shard else "5GB")
    return model


def _our_logits(model, token_ids):
    model = place_model(model, torch.device(TEST_DEVICE))
    dtype = next(model.parameters()).dtype
    pool = KVPool(model.config, num_slots=len(token_ids) // 16 + 1, block_size=16, dtype=dtype, device=TEST_DEVICE)
    slots = list(range(pool.num_slots))
    meta = PrefillMetadata.build(slots, 16, 0, len(token_ids))
    return model(torch.tensor(token_ids), torch.arange(len(token_ids)), pool, meta)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers_fp32(variant, tmp_path):
    kind, extra = VARIANTS[variant]
    hf = _build_hf(kind, extra, tmp_path)
    ours, _ = load_model(tmp_path, "fp32")
    tokens = torch.randint(0, BASE["vocab_size"], (300,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([tokens])).logits[0]
    got = _our_logits(ours, tokens)
    assert (got - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_continuation_matches_transformers(variant, tmp_path):
    kind, extra = VARIANTS[variant]
    hf = _build_hf(kind, extra, tmp_path)
    prompt = torch.randint(0, BASE["vocab_size"], (40,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = hf.generate(
            torch.tensor([prompt]), max_new_tokens=24, do_sample=False, min_new_tokens=24, pad_token_id=0
        )[0, len(prompt) :].tolist()
    engine = LLMEngine.from_dir(tmp_path, EngineConfig(kv_cache_bytes=8 << 20, device=TEST_DEVICE))
    got = engine.generate(prompt, SamplingParams(max_tokens=24, ignore_eos=True)).output_token_ids
    assert got == ref


def test_sharded_checkpoint_loads_same_weights(tmp_path):
    kind, extra = VARIANTS["llama-untied-llama3-rope"]
    _build_hf(kind, extra, tmp_path / "one")
    _build_hf(kind, extra, tmp_path / "sharded", shard=True)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    a, _ = load_model(tmp_path / "one")
    b, _ = load_model(tmp_path / "sharded")
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(pa, pb), name


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_close_to_fp32(dtype, tmp_path):
    kind, extra = VARIANTS["llama-tied"]
    _build_hf(kind, extra, tmp_path)
    full, _ = load_model(tmp_path, "fp32")
    half, _ = load_model(tmp_path, dtype)
    assert next(half.parameters()).dtype == (torch.bfloat16 if dtype == "bf16" else torch.float16)
    tokens = list(range(1, 120))
    diff = (_our_logits(full, tokens) - _our_logits(half, tokens)).abs().max().item()
    assert diff < 0.05
