"""A MoE model in the engine: prefix caching gives the full recompute's tokens, cached tokens are
not routed (so not counted), the recording mode writes each forward's counts, and an expert
placement splits replicated experts' copies over ranks without changing a bit of the output."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.costmodel.eplb import ClusterLayout
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.expert_load import RECORD_FORMAT
from agentserve.engine.expert_placement import ExpertPlacement

pytestmark = pytest.mark.unit

PROMPT_LEN, CACHED, NEW = 200, 160, 16
GREEDY = SamplingParams(max_tokens=NEW, ignore_eos=True)
WITH_LOGPROBS = SamplingParams(max_tokens=NEW, ignore_eos=True, logprobs=5)


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


def _even_split(counts: list[int], replica_ranks: list[list[int]], ranks: int) -> list[int]:
    """Each rank's copies when every expert's copies go round-robin over its replicas."""
    per_rank = [0] * ranks
    for copies, replicas in zip(counts, replica_ranks, strict=True):
        for j, rank in enumerate(replicas):
            per_rank[rank] += (copies - j + len(replicas) - 1) // len(replicas)
    return per_rank


def test_a_placement_splits_replicated_experts_and_leaves_the_output_bit_identical(mixtral_dir, prompt, tmp_path):
    plain = LLMEngine.from_dir(mixtral_dir, EngineConfig(prefix_cache=False))
    reference = plain.generate(prompt, WITH_LOGPROBS)
    # 4 ranks of 3 slots: each layer's 4 hottest experts (by the run without a placement) get a spare.
    loads = plain.model.expert_load.snapshot()
    placement = ExpertPlacement.plan([0, 1], loads, ClusterLayout(ranks=4, gpus_per_node=4, slots_per_rank=3))
    assert all(len(set(slots)) == 8 for slots in placement.slots)
    path = tmp_path / "placement.json"
    placement.write(path)
    engine = LLMEngine.from_dir(mixtral_dir, EngineConfig(prefix_cache=False, expert_placement=str(path)))
    recorder = engine.model.expert_load.record_to(tmp_path / "loads.jsonl")
    seq = engine.generate(prompt, WITH_LOGPROBS)
    recorder.close()
    assert seq.output_token_ids == reference.output_token_ids
    assert seq.logprobs == reference.logprobs  # every output token's log-probabilities, bit for bit
    assert engine.model.expert_load.snapshot() == loads
    _, *forwards = [json.loads(line) for line in (tmp_path / "loads.jsonl").read_text().splitlines()]
    for forward in forwards:
        for row, (counts, per_rank) in enumerate(zip(forward["counts"], forward["rank_counts"], strict=True)):
            assert per_rank == _even_split(counts, placement.replica_ranks(row), 4)
    total = torch.tensor([f["rank_counts"] for f in forwards]).sum(dim=0)
    assert total.tolist() == engine.model.expert_load.rank_snapshot()
    assert [sum(r) for r in engine.model.expert_load.rank_snapshot()] == [sum(c) for c in loads]


def test_a_placement_needs_a_moe_model_computed_for_real(tiny_model_dir, tmp_path):
    path = tmp_path / "placement.json"
    ExpertPlacement(ranks=1, layers=(0,), slots=((0,),)).write(path)
    with pytest.raises(ValueError, match="needs a MoE model"):
        LLMEngine.from_dir(tiny_model_dir, EngineConfig(expert_placement=str(path)))
    with pytest.raises(ValueError, match="expert_placement needs real compute"):
        EngineConfig(compute="emulated", expert_placement=str(path))
