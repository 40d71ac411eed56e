"""The trained tiny MoE (the tiny preset's mixtral variant, `agentserve model train --model-type
mixtral`) against transformers' own load of the same folder: logits, greedy tokens and routing."""

from __future__ import annotations

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.loader import load_model
from agentserve.engine.model_init import init_model
from agentserve.model_files.tokenizer import Tokenizer

from .test_moe_parity import _hf_expert_counts, _our_logits

pytestmark = pytest.mark.unit

MESSAGES = [
    {"role": "user", "content": "Can you decode the layer in node.py?"},
    {"role": "assistant", "content": "Sure. I will decode the layer, then sort the syntax and report back."},
    {"role": "tool", "content": '{"status": "ok", "lines": 337}'},
]


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("tiny-mixtral"), "tiny", model_type="mixtral")


@pytest.fixture(scope="module")
def prompt(trained_dir):
    tokenizer = Tokenizer.from_dir(trained_dir)
    return tokenizer.encode(tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True))


@pytest.fixture(scope="module")
def reference(trained_dir):
    model, info = transformers.MixtralForCausalLM.from_pretrained(trained_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    return model.eval()


def test_logits_and_routing_match_transformers(trained_dir, prompt, reference):
    ours, _ = load_model(trained_dir, "fp32")
    with torch.no_grad():
        ref = reference(torch.tensor([prompt])).logits[0]
    got = _our_logits(ours, prompt)
    assert (got - ref).abs().max().item() <= 1e-4 * ref.abs().max().item()
    assert ours.expert_load is not None
    assert ours.expert_load.snapshot() == _hf_expert_counts(reference, prompt)


def test_greedy_reply_matches_transformers(trained_dir, prompt, reference):
    with torch.no_grad():
        ref = reference.generate(
            torch.tensor([prompt]), max_new_tokens=24, do_sample=False, min_new_tokens=24, pad_token_id=0
        )[0, len(prompt) :].tolist()
    engine = LLMEngine.from_dir(trained_dir, EngineConfig(kv_cache_bytes=8 << 20))
    # Both sides hold the stop tokens off for all 24 (min_new_tokens / min_tokens mask them).
    got = engine.generate(prompt, SamplingParams(max_tokens=24, temperature=0.0, min_tokens=24)).output_token_ids
    assert got == ref
    assert len(set(got)) >= 4  # a trained reply, not one token repeated
