"""Segmented (TokenDance) prefills across real processes: exact mode and a round's leader give the
full recompute's tokens; a prompt that reused shared blocks hands no block of that KV on."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentserve.contracts import PrefillRequest, SamplingParams
from agentserve.contracts.segments import EXACT, PrivateSegment, ReusePolicy, SegmentedPrompt, SharedBlock
from agentserve.convert import prefill_request_to_proto
from agentserve.engine.default_model import ensure_default_model
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import split_corpus, token_stream
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc, prefill_pb2_grpc

pytestmark = pytest.mark.integration

MAX_TOKENS = 12
PARAMS = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def text() -> list[int]:
    """Held-out corpus text: on random tokens the reuse estimate passes the fallback threshold
    (it deviates, and those prompts are recomputed in full), on text it does not."""
    return token_stream(Tokenizer.from_dir(ensure_default_model()), split_corpus().held_out)


async def _turn(cluster, prompt: SegmentedPrompt):
    tokens = prompt.token_ids
    request = PrefillRequest("req", "s", "", tokens, PARAMS, decode_address=cluster["decode"].address, segments=prompt)
    async with (
        grpc.aio.insecure_channel(cluster["prefill"].address) as pch,
        grpc.aio.insecure_channel(cluster["decode"].address) as dch,
    ):
        pre = await prefill_pb2_grpc.PrefillStub(pch).Prefill(prefill_request_to_proto(request))
        out, chunks = [pre.first_token], []
        rest = decode_pb2.GenerateRequest(
            token_ids=tokens + [pre.first_token],
            prompt_tokens=len(tokens),
            sampling=common_pb2.SamplingParams(max_tokens=MAX_TOKENS - 1, ignore_eos=True),
        )
        async for chunk in decode_pb2_grpc.DecodeStub(dch).Generate(rest):
            chunks.append(chunk)
            out.extend(chunk.token_ids)
        return pre, out, chunks


def test_exact_and_leading_prompts_match_full_recompute_and_reused_kv_is_not_handed_off(cluster, reference, text):
    chunks_of = iter(range(0, len(text), 48))

    def take(n: int) -> tuple[int, ...]:
        start = next(chunks_of)
        return tuple(text[start : start + n])

    blocks = [SharedBlock(f"itest-segments-{i}", 0, take(48)) for i in range(3)]
    reuse = ReusePolicy(recompute_fraction=0.15)

    def prompt(agent: int, policy: ReusePolicy) -> SegmentedPrompt:
        order = [blocks[(agent + i) % 3] for i in range(3)]
        return SegmentedPrompt((PrivateSegment(take(40)), *order, PrivateSegment(take(8))), policy)

    leader, follower, exact = prompt(0, reuse), prompt(1, reuse), prompt(2, EXACT)
    # 40 + 3 * 48 + 8 = 192 tokens: 12 full blocks.
    pre, out, _ = asyncio.run(_turn(cluster, leader))
    assert out == reference.generate(leader.token_ids, PARAMS).output_token_ids
    assert pre.handoff_blocks == 12  # the leader was computed in full: its KV is exact

    pre, out, chunks = asyncio.run(_turn(cluster, follower))
    assert len(out) == MAX_TOKENS
    assert (pre.persisted_blocks, pre.handoff_blocks) == (0, 0)  # reused KV never passes for exact blocks
    assert chunks[0].cached_tokens == 0  # so the decode engine recomputed the prompt

    pre, out, _ = asyncio.run(_turn(cluster, exact))
    assert out == reference.generate(exact.token_ids, PARAMS).output_token_ids
    assert pre.handoff_blocks == 12
