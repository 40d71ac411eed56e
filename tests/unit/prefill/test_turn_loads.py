"""choose_loads: which store hits and which stored tail a prefill loads, and by which plan, exactly."""

from __future__ import annotations

from agentserve.contracts import KVPath, LoadPlan, PrefillRequest, SamplingParams
from agentserve.contracts.segments import PrivateSegment, SegmentedPrompt
from agentserve.prefill.turn_loads import PromptBlocks, TurnLoads, choose_loads

BLOCK = 4
IDS = [b"b0", b"b1", b"b2", b"b3"]
TAIL = b"tail"


def request(
    prompt_tokens: int, hits: int, tail_tokens: int = 0, plan: LoadPlan = LoadPlan(), segmented: bool = False
) -> PrefillRequest:
    tokens = list(range(prompt_tokens))
    return PrefillRequest(
        "r",
        "s",
        "",
        tokens,
        SamplingParams(max_tokens=4),
        store_hit_blocks=hits,
        plan=plan,
        segments=SegmentedPrompt((PrivateSegment(tuple(tokens)),)) if segmented else None,
        store_tail_tokens=tail_tokens,
    )


def test_the_hits_the_engine_does_not_hold_load():
    loads = choose_loads(request(18, hits=3), PromptBlocks(IDS, resident=1), BLOCK, layerwise=False)
    assert loads == TurnLoads(hits=3, blocks=[b"b1", b"b2"], tail=None, tail_tokens=0, plan=LoadPlan())
    assert loads.stored == 3


def test_hits_the_engine_holds_all_of_load_nothing():
    loads = choose_loads(request(18, hits=2), PromptBlocks(IDS, resident=3), BLOCK, layerwise=False)
    assert (loads.hits, loads.blocks, loads.stored) == (2, [], 2)


def test_a_layerwise_prompt_of_stored_whole_blocks_recomputes_its_last():
    # 16 tokens, all four blocks stored: a layerwise prefill streams three and computes the fourth.
    loads = choose_loads(request(16, hits=4), PromptBlocks(IDS, resident=0), BLOCK, layerwise=True)
    assert (loads.hits, loads.blocks) == (3, [b"b0", b"b1", b"b2"])
    # Loaded into the pool, all four load: the engine's prefix cache leaves the last token to compute.
    pooled = choose_loads(request(16, hits=4), PromptBlocks(IDS, resident=0), BLOCK, layerwise=False)
    assert (pooled.hits, pooled.blocks) == (4, IDS)


def test_the_tail_loads_behind_the_hits():
    prompt = PromptBlocks(IDS, resident=1, tail=TAIL)
    loads = choose_loads(request(15, hits=2, tail_tokens=3), prompt, BLOCK, layerwise=True)
    assert loads == TurnLoads(hits=2, blocks=[b"b1", TAIL], tail=TAIL, tail_tokens=3, plan=LoadPlan())
    assert loads.stored == 3


def test_no_tail_past_a_block_the_engine_holds_whole():
    prompt = PromptBlocks(IDS, resident=3, tail=TAIL)
    loads = choose_loads(request(15, hits=2, tail_tokens=3), prompt, BLOCK, layerwise=False)
    assert (loads.blocks, loads.tail, loads.tail_tokens, loads.stored) == ([], None, 0, 2)


def test_no_tail_where_layerwise_leaves_a_hit_to_compute():
    # 14 tokens, three hits: a layerwise prefill counts (14 - 1) // 4 = 3 of them, all; with 12
    # tokens it counts (12 - 1) // 4 = 2, so the tail (after the third) does not extend them.
    prompt = PromptBlocks(IDS[:3], resident=0, tail=TAIL)
    kept = choose_loads(request(14, hits=3, tail_tokens=1), prompt, BLOCK, layerwise=True)
    assert (kept.hits, kept.blocks, kept.tail) == (3, [b"b0", b"b1", b"b2", TAIL], TAIL)
    cut = choose_loads(request(12, hits=3, tail_tokens=1), prompt, BLOCK, layerwise=True)
    assert (cut.hits, cut.blocks, cut.tail, cut.tail_tokens) == (2, [b"b0", b"b1"], None, 0)


def test_no_tail_beside_shared_blocks():
    prompt = PromptBlocks(IDS, resident=0, tail=TAIL)
    loads = choose_loads(request(15, hits=2, tail_tokens=3, segmented=True), prompt, BLOCK, layerwise=False)
    assert (loads.blocks, loads.tail, loads.tail_tokens) == ([b"b0", b"b1"], None, 0)


def test_a_split_relays_its_share_of_what_loads():
    # Two of four hits relayed by plan; the engine holds two, so two load, and half of them go by B.
    plan = LoadPlan(KVPath.SPLIT, relay_address="d:1", relay_blocks=2)
    loads = choose_loads(request(18, hits=4, plan=plan), PromptBlocks(IDS, resident=2), BLOCK, layerwise=False)
    assert loads.blocks == [b"b2", b"b3"]
    assert loads.plan == LoadPlan(KVPath.SPLIT, relay_address="d:1", relay_blocks=1)


def test_a_split_counts_the_tail_among_the_stored_blocks():
    # Three of four stored blocks (three hits and the tail) relayed; all four load: three by B.
    plan = LoadPlan(KVPath.SPLIT, relay_address="d:1", relay_blocks=3)
    prompt = PromptBlocks(IDS[:3], resident=0, tail=TAIL)
    loads = choose_loads(request(15, hits=3, tail_tokens=2, plan=plan), prompt, BLOCK, layerwise=False)
    assert loads.blocks == [b"b0", b"b1", b"b2", TAIL]
    assert loads.plan.relay_blocks == 3
