"""Prefill -> handoff -> decode -> persist across real processes, checked against full recompute."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest

from agentserve.contracts import SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.kvstore.client import KVStoreClient
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2, prefill_pb2_grpc

pytestmark = pytest.mark.integration

MAX_TOKENS = 24


async def _turn(cluster, tokens: list[int], store_hits: int):
    sampling = common_pb2.SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    async with (
        grpc.aio.insecure_channel(cluster["prefill"].address) as pch,
        grpc.aio.insecure_channel(cluster["decode"].address) as dch,
    ):
        pre = await prefill_pb2_grpc.PrefillStub(pch).Prefill(
            prefill_pb2.PrefillRequest(
                token_ids=tokens,
                sampling=sampling,
                store_hit_blocks=store_hits,
                decode_address=cluster["decode"].address,
            )
        )
        out, chunks = [pre.first_token], []
        request = decode_pb2.GenerateRequest(
            token_ids=tokens + [pre.first_token],
            prompt_tokens=len(tokens),
            sampling=common_pb2.SamplingParams(max_tokens=MAX_TOKENS - 1, ignore_eos=True),
        )
        async for chunk in decode_pb2_grpc.DecodeStub(dch).Generate(request):
            chunks.append(chunk)
            out.extend(chunk.token_ids)
        return pre, out, chunks


def test_two_turns_hit_store_and_match_full_recompute(cluster, reference):
    rng = random.Random(3)
    turn1 = [rng.randrange(5, 8000) for _ in range(100)]
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)

    pre1, out1, chunks1 = asyncio.run(_turn(cluster, turn1, 0))
    assert out1 == reference.generate(turn1, params).output_token_ids
    # 100 tokens = 6 full blocks, persisted, and a 4-token tail, handed off with them
    assert pre1.persisted_blocks == 6 and pre1.handoff_blocks == 7
    assert chunks1[0].cached_tokens == 100  # decode hit every handed-off block and the tail
    assert chunks1[-1].finished and chunks1[-1].finish_reason == "length"

    turn2 = turn1 + out1 + [7, 8, 9, 10]
    ids = block_ids_for(turn2, 16, reference.fingerprint, "")

    async def lookup():
        async with KVStoreClient(cluster["kvstore"].address) as client:
            return await client.lookup(ids)

    store_hits = asyncio.run(lookup())
    assert store_hits == (100 + MAX_TOKENS) // 16  # prompt blocks (prefill) + output blocks (decode)

    pre2, out2, _ = asyncio.run(_turn(cluster, turn2, store_hits))
    assert pre2.loaded_blocks == store_hits - 6  # the output block came from the store (path A)
    assert pre2.cached_tokens == store_hits * 16
    assert out2 == reference.generate(turn2, params).output_token_ids


def test_bad_input_is_invalid_argument_and_engines_stay_up(cluster):
    async def main():
        async with grpc.aio.insecure_channel(cluster["prefill"].address) as ch:
            stub = prefill_pb2_grpc.PrefillStub(ch)
            for tokens, max_tokens, message in (
                ([], 4, "prompt is empty"),
                ([5, 10**6], 4, "out of range"),
                ([5, 6], 0, "max_tokens must be positive"),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Prefill(
                        prefill_pb2.PrefillRequest(
                            token_ids=tokens, sampling=common_pb2.SamplingParams(max_tokens=max_tokens)
                        )
                    )
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert message in err.value.details()
            ok = await stub.Prefill(
                prefill_pb2.PrefillRequest(token_ids=[5, 6, 7], sampling=common_pb2.SamplingParams(max_tokens=1))
            )
            return ok

    assert asyncio.run(main()).finished


def test_decode_bad_input_is_invalid_argument_and_engine_stays_up(cluster):
    async def main():
        async with grpc.aio.insecure_channel(cluster["decode"].address) as ch:
            stub = decode_pb2_grpc.DecodeStub(ch)
            ok = common_pb2.SamplingParams(max_tokens=3, ignore_eos=True)
            cases = {
                "prompt is empty": decode_pb2.GenerateRequest(token_ids=[], prompt_tokens=0, sampling=ok),
                "out of range": decode_pb2.GenerateRequest(token_ids=[5, 10**6], prompt_tokens=2, sampling=ok),
                "prompt_tokens must be": decode_pb2.GenerateRequest(token_ids=[5, 6], prompt_tokens=3, sampling=ok),
                "max_tokens must be positive": decode_pb2.GenerateRequest(
                    token_ids=[5, 6], prompt_tokens=2, sampling=common_pb2.SamplingParams(max_tokens=0)
                ),
            }
            for message, request in cases.items():
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    [chunk async for chunk in stub.Generate(request)]
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, message
                assert message in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.LoadKV(iter([common_pb2.KVBlock(block_id=b"\x01" * 16, data=b"not a kv block")]))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            return [
                chunk
                async for chunk in stub.Generate(
                    decode_pb2.GenerateRequest(token_ids=[5, 6, 7], prompt_tokens=3, sampling=ok)
                )
            ]

    chunks = asyncio.run(main())
    assert chunks[-1].finished and sum(len(c.token_ids) for c in chunks) == 3
