"""The scheduler with its KV store down (UNAVAILABLE, DEADLINE_EXCEEDED): a turn's lookup counts
as no hits, the turn is served by its engines, and no engine is blamed or dropped."""

from __future__ import annotations

import grpc
import pytest

from agentserve.contracts import SamplingParams
from agentserve.scheduler import metrics
from agentserve.scheduler.registry import Role
from tests.unit.scheduler.fakes import collect, run

pytestmark = pytest.mark.unit


class DownStore:
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code

    async def lookup(self, block_ids: list[bytes]) -> int:
        raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="store down")


def failures(role: Role) -> float:
    return metrics.ENGINE_FAILURES.labels(role.value)._value.get()


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_a_store_outage_costs_only_the_hits(make_core, engines, store, code) -> None:
    store.lookup = DownStore(code).lookup
    core = make_core()
    before = {role: failures(role) for role in Role}

    async def go():
        sid = await core.open_session()
        return await collect(core.turn(sid, token_ids=list(range(10, 60)), sampling=SamplingParams(max_tokens=16)))

    events = run(go())
    assert events[-1].finished and [t for e in events for t in e.token_ids] == engines.reply
    assert [request.store_hit_blocks for _, request, _ in engines.prefills] == [0]  # one prefill, no retry
    assert events[0].metadata.cached_tokens == 0
    assert {e.engine_id for e in core.registry.alive(Role.PREFILL)} == {"p0"}
    assert {e.engine_id for e in core.registry.alive(Role.DECODE)} == {"d0", "d1"}
    assert engines.forgotten == [] and {role: failures(role) for role in Role} == before
