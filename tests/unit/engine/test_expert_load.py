"""A MoE model in the engine: prefix caching gives the full recompute's tokens, cached tokens are
not routed (so not counted), and the recording mode writes each forward's counts."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.expert_load import RECORD_FORMAT

pytestmark = pytest.mark.unit

PROMPT_LEN, CACHED, NEW = 200, 160, 16
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def mixtral_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("mixtral")
    config = transformers.MixtralConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=8,
        num_experts_per_tok=2,
    )
    torch.manual_seed(5)
    model = transformers.MixtralForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("block_sparse_moe.gate.weight"):
                p.normal_(0, 64**-0.5)  # decided routing (see test_moe_parity)
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(5, 512, (PROMPT_LEN,), generator=torch.Generator().manual_seed(11)).tolist()


def test_cache_hit_matches_full_recompute_and_routes_only_computed_tokens(mixtral_dir, prompt):
    reference = LLMEngine.from_dir(mixtral_dir, EngineConfig(prefix_cache=False)).generate(prompt, GREEDY)
    engine = LLMEngine.from_dir(mixtral_dir, EngineConfig(block_size=16))
    engine.generate(prompt[:CACHED] + [7] * 8, SamplingParams(max_tokens=1))
    load = engine.model.expert_load
    before = load.counts.clone()
    seq = engine.generate(prompt, GREEDY)
    assert seq.num_cached_tokens == CACHED
    assert seq.output_token_ids == reference.output_token_ids
    # Computed: the 40 uncached prompt tokens, then one per decode step but the last (its token
    # is sampled, never fed back); each routed to top_k = 2 experts in each layer.
    computed = (PROMPT_LEN - CACHED) + (NEW - 1)
    assert (load.counts - before).sum(dim=1).tolist() == [2 * computed, 2 * computed]


def test_recording_writes_each_forward_s_counts(mixtral_dir, prompt, tmp_path):
    engine = LLMEngine.from_dir(mixtral_dir, EngineConfig(prefix_cache=False))
    path = tmp_path / "loads.jsonl"
    recorder = engine.model.expert_load.record_to(path)
    engine.generate(prompt, GREEDY)
    recorder.close()
    header, *forwards = [json.loads(line) for line in path.read_text().splitlines()]
    assert header == {"format": RECORD_FORMAT, "layers": [0, 1], "num_experts": 8, "top_k": 2}
    # One prefill forward, then NEW - 1 decode forwards of one token each.
    assert [f["forward"] for f in forwards] == list(range(NEW))
    assert [sum(f["counts"][0]) for f in forwards] == [2 * PROMPT_LEN] + [2] * (NEW - 1)
    total = torch.tensor([f["counts"] for f in forwards]).sum(dim=0)
    assert total.tolist() == engine.model.expert_load.snapshot()
