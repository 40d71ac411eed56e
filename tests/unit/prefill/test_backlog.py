"""PrefillBacklog: tokens left to compute of the prefills in flight, as the heartbeat reports them."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import PrefillRequest, PrefillResult, SamplingParams
from agentserve.prefill.backlog import PrefillBacklog

pytestmark = pytest.mark.unit


class GatedWorker:
    """Holds every prefill until its gate opens; fails those whose request id says so."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        gate = self.gates.setdefault(request.request_id, asyncio.Event())
        await gate.wait()
        if request.request_id.startswith("fail"):
            raise ValueError("bad request")
        return PrefillResult(1, len(request.token_ids), 0, 0, 0, 0, 0, False, "")


def request(request_id: str, tokens: int, hits: int) -> PrefillRequest:
    return PrefillRequest(
        request_id=request_id,
        session_id="s",
        tenant="",
        token_ids=list(range(tokens)),
        sampling=SamplingParams(max_tokens=1),
        store_hit_blocks=hits,
        decode_address="",
    )


def test_counts_prompt_less_store_hits_from_accept_until_return_or_failure() -> None:
    async def go() -> list[int]:
        worker = GatedWorker()
        backlog = PrefillBacklog(worker, block_size=16)  # type: ignore[arg-type]
        seen = [backlog.tokens]
        a = asyncio.create_task(backlog.prefill(request("a", 100, hits=4)))  # 100 - 64 = 36 to compute
        b = asyncio.create_task(backlog.prefill(request("fail-b", 50, hits=0)))
        await asyncio.sleep(0)
        seen.append(backlog.tokens)
        worker.gates["fail-b"].set()
        with pytest.raises(ValueError):
            await b
        seen.append(backlog.tokens)
        worker.gates["a"].set()
        await a
        seen.append(backlog.tokens)
        return seen

    assert asyncio.run(go()) == [0, 86, 36, 0]
