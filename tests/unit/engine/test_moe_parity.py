"""Qwen2-MoE, Qwen3-MoE and Mixtral against Hugging Face transformers on the same random tiny weights:
fp32 logits within the dense path's tolerance, greedy continuations identical, and the engine's
per-expert counts equal to the routing transformers computes."""

from __future__ import annotations

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.config import ModelConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model

pytestmark = pytest.mark.unit

BASE = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
    num_experts_per_tok=2,
    tie_word_embeddings=False,
)

VARIANTS = {
    # Layer 1 dense (mlp_only_layers), top-2 of 6 without renormalisation, a shared expert.
    "qwen2_moe": (
        transformers.Qwen2MoeConfig,
        transformers.Qwen2MoeForCausalLM,
        dict(
            num_experts=6,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=96,
            intermediate_size=128,
            mlp_only_layers=[1],
            rope_theta=1000000.0,
        ),
    ),
    "qwen2_moe-renormalised": (
        transformers.Qwen2MoeConfig,
        transformers.Qwen2MoeForCausalLM,
        dict(num_experts=4, moe_intermediate_size=48, shared_expert_intermediate_size=64, norm_topk_prob=True),
    ),
    # Qwen3-MoE: per-head q/k RMSNorm, no shared expert, layer 1 dense, top-2 of 6 renormalised.
    "qwen3_moe": (
        transformers.Qwen3MoeConfig,
        transformers.Qwen3MoeForCausalLM,
        dict(
            num_experts=6,
            moe_intermediate_size=32,
            intermediate_size=128,
            mlp_only_layers=[1],
            norm_topk_prob=True,
            head_dim=32,
            rope_theta=1000000.0,
        ),
    ),
    "mixtral": (
        transformers.MixtralConfig,
        transformers.MixtralForCausalLM,
        dict(num_local_experts=8, intermediate_size=48, rope_theta=1000000.0),
    ),
}


def _build_hf(variant: str, out_dir):
    config_cls, model_cls, extra = VARIANTS[variant]
    torch.manual_seed(1234)
    model = model_cls(config_cls(**BASE, **extra))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):  # HF zero-inits biases; make them count
                p.normal_(0, 0.02)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):  # HF inits them to ones; make them count
                p.uniform_(0.5, 1.5)
            elif name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight", "shared_expert_gate.weight")):
                # Routers at HF's 0.02 init give near-uniform probabilities, where a rounding
                # could swap two experts; at fan-in scale each token's choice is decided.
                p.normal_(0, BASE["hidden_size"] ** -0.5)
    model.eval()
    model.save_pretrained(out_dir)
    return model


def _our_logits(model, token_ids):
    pool = KVPool(model.config, num_slots=len(token_ids) // 16 + 1, block_size=16, dtype=torch.float32)
    meta = PrefillMetadata.build(list(range(pool.num_slots)), 16, 0, len(token_ids))
    return model(torch.tensor(token_ids), torch.arange(len(token_ids)), pool, meta)


def _hf_expert_counts(hf, tokens) -> list[list[int]]:
    """Tokens per expert per sparse layer, from transformers' own router logits."""
    with torch.no_grad():
        out = hf(torch.tensor([tokens]), output_router_logits=True)
    top_k = hf.config.num_experts_per_tok
    counts = []
    for logits in out.router_logits:
        chosen = torch.topk(torch.softmax(logits.float(), -1), top_k, dim=-1).indices
        counts.append(torch.bincount(chosen.flatten(), minlength=logits.shape[-1]).tolist())
    return counts


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_and_expert_counts_match_transformers_fp32(variant, tmp_path):
    hf = _build_hf(variant, tmp_path)
    ours, _ = load_model(tmp_path, "fp32")
    assert ours.config.moe is not None
    tokens = torch.randint(0, BASE["vocab_size"], (300,), generator=torch.Generator().manual_seed(7)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([tokens])).logits[0]
    got = _our_logits(ours, tokens)
    assert (got - ref).abs().max().item() <= 1e-4
    assert ours.expert_load is not None
    assert ours.expert_load.snapshot() == _hf_expert_counts(hf, tokens)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_continuation_matches_transformers(variant, tmp_path):
    hf = _build_hf(variant, tmp_path)
    prompt = torch.randint(0, BASE["vocab_size"], (40,), generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref = hf.generate(
            torch.tensor([prompt]), max_new_tokens=24, do_sample=False, min_new_tokens=24, pad_token_id=0
        )[0, len(prompt) :].tolist()
    engine = LLMEngine.from_dir(tmp_path, EngineConfig(kv_cache_bytes=8 << 20))
    got = engine.generate(prompt, SamplingParams(max_tokens=24, ignore_eos=True)).output_token_ids
    assert got == ref


def test_qwen2_moe_sparse_layers_follow_step_and_dense_list():
    raw = dict(
        model_type="qwen2_moe",
        vocab_size=8,
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=4,
        decoder_sparse_step=2,
        mlp_only_layers=[3],
    )
    moe = ModelConfig.from_dict(raw).moe
    assert moe is not None
    assert moe.sparse_layers == (1, 5)
    assert moe.renormalise is False and moe.has_shared_expert is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(num_experts_per_tok=5), "num_experts_per_tok"),
        (dict(num_experts=0), "num_experts"),
        (dict(use_sliding_window=True), "use_sliding_window"),
    ],
)
def test_bad_moe_config_names_the_field(change, message):
    raw = dict(
        model_type="qwen2_moe",
        vocab_size=8,
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=4,
    )
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_dict({**raw, **change})


def test_moe_config_missing_field_is_named():
    raw = dict(
        model_type="mixtral",
        vocab_size=8,
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_experts_per_tok=2,
    )
    with pytest.raises(ValueError, match="num_local_experts"):
        ModelConfig.from_dict(raw)
