"""DualPath at the engines: a turn's store hits loaded by path A, by path B (relayed by a cold decode
engine that reads them from the store), split over both, or by B through a dead relay (falls back
to A) give the same tokens as a full recompute; the relaying decode engine keeps the blocks, so the
handoff sends only what it lacks.

Each case runs the same two-turn conversation in its own tenant: block ids differ, tokens do not.
"""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from agentserve.contracts import SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.kvstore.client import KVStoreClient
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

BLOCK = 16
MAX_TOKENS = 40
TURN1 = [random.Random(17).randrange(5, 8000) for _ in range(100)]
EXTRA = [11, 12, 13, 14, 15]
# turn 1: 100 prompt + 40 output = 140 tokens, 8 full blocks stored; the prefill holds the 6 of its prompt
STORED = (len(TURN1) + MAX_TOKENS) // BLOCK
PREFILL_HELD = len(TURN1) // BLOCK


async def _turn(  # noqa: PLR0913 - one turn's engines, tokens and load plan, as the RPCs take them
    prefill: str,
    decode: str,
    tokens: list[int],
    tenant: str,
    hits: int = 0,
    kv_path: int = prefill_pb2.KV_PATH_A,
    relay: str = "",
    relay_blocks: int = 0,
    tail: int = 0,
):
    """One turn; its decode persists the context's tail, which a later turn loads with `tail`."""
    sampling = common_pb2.SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    async with grpc.aio.insecure_channel(prefill) as pch, grpc.aio.insecure_channel(decode) as dch:
        pre = await prefill_pb2_grpc.PrefillStub(pch).Prefill(
            prefill_pb2.PrefillRequest(
                token_ids=tokens,
                sampling=sampling,
                tenant=tenant,
                store_hit_blocks=hits,
                decode_address=decode,
                kv_path=kv_path,
                relay_address=relay,
                relay_blocks=relay_blocks,
                store_tail_tokens=tail,
            )
        )
        out = [pre.first_token]
        request = decode_pb2.GenerateRequest(
            token_ids=tokens + out,
            prompt_tokens=len(tokens),
            tenant=tenant,
            sampling=common_pb2.SamplingParams(max_tokens=MAX_TOKENS - 1, ignore_eos=True),
            persist_tail=True,
        )
        chunks = [chunk async for chunk in decode_pb2_grpc.DecodeStub(dch).Generate(request)]
        # The prompt's full blocks and its tail were handed off: the decode computes the first token only.
        assert chunks[0].cached_tokens == len(tokens)
        for chunk in chunks:
            out.extend(chunk.token_ids)
        return pre, out


async def _held(decode: str, ids: list[bytes]) -> list[bool]:
    async with grpc.aio.insecure_channel(decode) as channel:
        reply = await decode_pb2_grpc.DecodeStub(channel).Lookup(decode_pb2.HeldBlocksRequest(block_ids=ids))
    return list(reply.held)


def _conversation(
    cluster,
    reference,
    tenant: str,
    kv_path: int,
    relay: str = "",
    relay_blocks: int = 0,
    prefill_name="prefill",
    tail: int = 0,
):
    """Turn 1 by path A onto `decode`, turn 2 by `kv_path` onto the cold `decode2` (relayed by
    `relay`: the scheduler relays through the turn's decode engine), loading turn 1's stored tail
    of `tail` tokens after the hits if not 0. Both turns match recompute."""
    prefill, decode, decode2 = (cluster[n].address for n in (prefill_name, "decode", "decode2"))
    _, out1 = asyncio.run(_turn(prefill, decode, TURN1, tenant))
    turn2 = TURN1 + out1 + EXTRA
    ids = block_ids_for(turn2, BLOCK, reference.fingerprint, tenant)

    async def lookup():
        async with KVStoreClient(cluster["kvstore"].address) as client:
            return await client.lookup(ids)

    hits = asyncio.run(lookup())
    assert hits == STORED
    pre, out2 = asyncio.run(_turn(prefill, decode2, turn2, tenant, hits, kv_path, relay, relay_blocks, tail))
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    assert out1 == reference.generate(TURN1, params).output_token_ids
    assert out2 == reference.generate(turn2, params).output_token_ids
    return pre, out2, ids


def test_path_a_b_and_split_give_identical_tokens(cluster, reference):
    decode2 = cluster["decode2"].address
    by_a, tokens_a, _ = _conversation(cluster, reference, "path-a", prefill_pb2.KV_PATH_A)
    by_b, tokens_b, ids_b = _conversation(cluster, reference, "path-b", prefill_pb2.KV_PATH_B, decode2)
    split, tokens_split, _ = _conversation(
        cluster, reference, "path-split", prefill_pb2.KV_PATH_SPLIT, decode2, relay_blocks=STORED // 2
    )
    assert tokens_a == tokens_b == tokens_split

    loaded = STORED - PREFILL_HELD  # turn 1's output blocks: the prefill engine never computed them
    assert (by_a.kv_path, by_a.loaded_blocks, by_a.relayed_blocks) == (prefill_pb2.KV_PATH_A, loaded, 0)
    assert (by_b.kv_path, by_b.loaded_blocks, by_b.relayed_blocks) == (prefill_pb2.KV_PATH_B, loaded, loaded)
    # Half the hits by B: the prefill applies that share to the 2 blocks it loads.
    assert (split.kv_path, split.loaded_blocks, split.relayed_blocks) == (prefill_pb2.KV_PATH_SPLIT, loaded, 1)
    for pre in (by_a, by_b, split):
        assert pre.cached_tokens == STORED * BLOCK

    # The cold relay engine read the blocks from the store and kept them: the handoff skipped them
    # and sent the rest of the prompt's full blocks, and its tail (145 tokens: 9 blocks and 1).
    full = len(ids_b)
    assert (by_a.handoff_held_blocks, by_a.handoff_blocks) == (0, full + 1)
    assert (by_b.handoff_held_blocks, by_b.handoff_blocks) == (loaded, full - loaded + 1)
    assert by_b.handoff_bytes == (full - loaded + 1) * by_a.handoff_bytes // (full + 1)
    assert all(asyncio.run(_held(decode2, ids_b)))


def test_dead_relay_falls_back_to_path_a(cluster, reference):
    dead = f"127.0.0.1:{free_port()}"
    pre, _, _ = _conversation(cluster, reference, "dead-relay", prefill_pb2.KV_PATH_B, dead)
    assert (pre.kv_path, pre.loaded_blocks, pre.relayed_blocks) == (prefill_pb2.KV_PATH_A, STORED - PREFILL_HELD, 0)


def test_second_turn_on_the_same_decode_hands_off_only_the_new_blocks(cluster, reference):
    prefill, decode = cluster["prefill"].address, cluster["decode"].address
    _, out1 = asyncio.run(_turn(prefill, decode, TURN1, "sticky"))
    turn2 = TURN1 + out1 + EXTRA * 8  # 40 new tokens: 2 more full blocks, the decode holds the other 8
    ids = block_ids_for(turn2, BLOCK, reference.fingerprint, "sticky")
    pre, out2 = asyncio.run(_turn(prefill, decode, turn2, "sticky", STORED))
    assert out2 == reference.generate(turn2, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)).output_token_ids
    assert (pre.handoff_held_blocks, pre.handoff_blocks) == (STORED, len(ids) - STORED + 1)  # and the tail


def test_layerwise_prefill_gives_identical_tokens_on_every_path(cluster, reference):
    # The layerwise engine streams turn 2's loaded blocks into per-layer buffers and stages them a
    # layer at a time beside its own resident blocks; the decode engine gets the loaded blocks it
    # lacks from those buffers (path A) or already holds them (it relayed them, path B).
    decode2 = cluster["decode2"].address
    loaded = STORED - PREFILL_HELD
    cases = [
        ("lw-a", prefill_pb2.KV_PATH_A, "", 0, (prefill_pb2.KV_PATH_A, loaded, 0)),
        ("lw-b", prefill_pb2.KV_PATH_B, decode2, 0, (prefill_pb2.KV_PATH_B, loaded, loaded)),
        ("lw-split", prefill_pb2.KV_PATH_SPLIT, decode2, STORED // 2, (prefill_pb2.KV_PATH_SPLIT, loaded, 1)),
    ]
    for tenant, kv_path, relay, relay_blocks, expected in cases:
        pre, _, ids = _conversation(cluster, reference, tenant, kv_path, relay, relay_blocks, "prefill-layerwise")
        assert (pre.kv_path, pre.loaded_blocks, pre.relayed_blocks) == expected, tenant
        assert pre.cached_tokens == STORED * BLOCK
        assert pre.handoff_held_blocks + pre.handoff_blocks == len(ids) + 1  # the full blocks and the tail
        assert all(asyncio.run(_held(decode2, ids))), tenant


@pytest.mark.parametrize("prefill_name", ["prefill", "prefill-layerwise"])
def test_a_stored_tail_gives_identical_tokens_on_every_path(cluster, reference, prefill_name):
    # Turn 1's decode engine computed 139 of its 140 tokens: 8 full blocks and a tail of 11, which it
    # persisted under the tail's id. Turn 2 loads it behind the hits by the hits' path (a split's
    # 4 of 9 stored blocks by B is 1 of the 3 it loads) and computes from token 139 on.
    decode2 = cluster["decode2"].address
    loaded, tail = STORED - PREFILL_HELD + 1, len(TURN1) + MAX_TOKENS - 1 - STORED * BLOCK
    cases = [
        ("a", prefill_pb2.KV_PATH_A, "", 0, (prefill_pb2.KV_PATH_A, loaded, 0)),
        ("b", prefill_pb2.KV_PATH_B, decode2, 0, (prefill_pb2.KV_PATH_B, loaded, loaded)),
        ("split", prefill_pb2.KV_PATH_SPLIT, decode2, (STORED + 1) // 2, (prefill_pb2.KV_PATH_SPLIT, loaded, 1)),
    ]
    for name, kv_path, relay, relay_blocks, expected in cases:
        tenant = f"tail-{prefill_name}-{name}"
        pre, _, ids = _conversation(cluster, reference, tenant, kv_path, relay, relay_blocks, prefill_name, tail)
        assert (pre.kv_path, pre.loaded_blocks, pre.relayed_blocks) == expected, tenant
        assert pre.cached_tokens == STORED * BLOCK + tail == len(TURN1) + MAX_TOKENS - 1, tenant
        # the block the tail sat in went to the decode engine under its full id, like every block
        assert pre.handoff_held_blocks + pre.handoff_blocks == len(ids) + 1  # the full blocks and the tail
        assert all(asyncio.run(_held(decode2, ids))), tenant


def test_layerwise_concurrent_turns_batched_by_quota_match_recompute(cluster, reference):
    prefill, decode = cluster["prefill-layerwise"].address, cluster["decode"].address
    tenants = [f"quota-{i}" for i in range(4)]
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)

    async def both_turns(tenant: str, first: list[int]):
        _, out1 = await _turn(prefill, decode, first, tenant)
        turn2 = first + out1 + EXTRA
        async with KVStoreClient(cluster["kvstore"].address) as client:
            hits = await client.lookup(block_ids_for(turn2, BLOCK, reference.fingerprint, tenant))
        assert hits == (len(first) + MAX_TOKENS) // BLOCK
        pre, out2 = await _turn(prefill, decode, turn2, tenant, hits)
        return out1, turn2, pre, out2

    async def all_at_once():
        firsts = [TURN1[: 80 + 5 * i] for i in range(len(tenants))]
        return firsts, await asyncio.gather(*(both_turns(t, f) for t, f in zip(tenants, firsts)))

    firsts, results = asyncio.run(all_at_once())
    for first, (out1, turn2, pre, out2) in zip(firsts, results):
        assert out1 == reference.generate(first, params).output_token_ids
        assert out2 == reference.generate(turn2, params).output_token_ids
        assert pre.cached_tokens == (len(first) + MAX_TOKENS) // BLOCK * BLOCK


def test_layerwise_prompt_of_whole_stored_blocks_recomputes_only_its_last(cluster, reference):
    """A prompt that is whole blocks, all in the store (a turn sent again, a shared prefix warmed
    twice): the layerwise prefill streams all but the last block and computes that one, since a
    prefill computes at least the prompt's last token; tokens match a full recompute."""
    prefill, decode = cluster["prefill-layerwise"].address, cluster["decode"].address
    tenant = "whole-blocks"
    _, out1 = asyncio.run(_turn(prefill, decode, TURN1, tenant))
    prompt = (TURN1 + out1)[: STORED * BLOCK]  # turn 1's 8 stored blocks and nothing more
    ids = block_ids_for(prompt, BLOCK, reference.fingerprint, tenant)

    async def lookup():
        async with KVStoreClient(cluster["kvstore"].address) as client:
            return await client.lookup(ids)

    assert asyncio.run(lookup()) == len(ids) == STORED
    pre, out2 = asyncio.run(_turn(prefill, decode, prompt, tenant, hits=STORED))
    # The prefill holds turn 1's 6 prompt blocks; it streams block 7 of 8 and computes the 8th.
    assert (pre.kv_path, pre.loaded_blocks, pre.cached_tokens) == (prefill_pb2.KV_PATH_A, 1, (STORED - 1) * BLOCK)
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    assert out2 == reference.generate(prompt, params).output_token_ids
