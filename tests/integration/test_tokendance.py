"""All-gather rounds through the whole system (local processes, the SDK): a round's turns marking
shared blocks by content id. Exact mode gives token for token what a full recompute of the same
prompt gives; a bad segment is INVALID_ARGUMENT naming the block."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentserve.contracts import SamplingParams
from agentserve.sdk import Client, InvalidRequestError, ReuseMode, ReusePolicy, SharedRef, TurnSegments

pytestmark = pytest.mark.integration

AGENTS = 4
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def cluster(shared_cluster):
    return shared_cluster


def test_exact_rounds_match_full_recompute_token_for_token(cluster, reference) -> None:
    rng = random.Random(16)
    histories = [[rng.randrange(5, 8000) for _ in range(40 + 7 * a)] for a in range(AGENTS)]
    params = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True)
    address = f"127.0.0.1:{cluster.ports.scheduler}"
    with Client(address) as client:
        sessions = [client.open_session(tenant="td", agent=f"agent{a}") for a in range(AGENTS)]
        outputs = []
        for a, session in enumerate(sessions):
            result = session.turn(token_ids=histories[a], max_tokens=MAX_TOKENS, ignore_eos=True).result()
            assert result.token_ids == reference.generate(histories[a], params).output_token_ids
            histories[a] = histories[a] + result.token_ids
            outputs.append(result.token_ids)

        # Round 1: every agent gets every agent's output, in an order of its own, after a private line.
        def gather(a: int):
            order = [(a + i) % AGENTS for i in range(AGENTS)]
            new = [7 + a] + [t for b in order for t in outputs[b]]
            refs = tuple(SharedRef(f"r0/agent{b}", tuple(outputs[b])) for b in order)
            segments = TurnSegments(1, refs, ReusePolicy(ReuseMode.EXACT))
            turn = sessions[a].turn(token_ids=new, max_tokens=MAX_TOKENS, ignore_eos=True, segments=segments)
            return histories[a] + new, turn.result()

        with ThreadPoolExecutor(AGENTS) as pool:  # the round's turns arrive together
            results = list(pool.map(gather, range(AGENTS)))
        for prompt, result in results:
            assert result.prompt_tokens == len(prompt)
            assert result.token_ids == reference.generate(prompt, params).output_token_ids
        for session in sessions:
            session.close()


def test_a_block_the_turn_does_not_hold_is_invalid_argument(cluster) -> None:
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client, client.open_session(tenant="td") as session:
        segments = TurnSegments(0, (SharedRef("missing", (11, 12, 13)),))
        with pytest.raises(InvalidRequestError, match="shared block 'missing': its tokens do not occur"):
            session.turn(token_ids=[20, 21, 22, 23], max_tokens=4, segments=segments).result()
