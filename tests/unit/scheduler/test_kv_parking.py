"""KVParking: which moves a tool wait triggers, and when, with fake engine moves (domain types)."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts import AgentInfo, EngineUnavailable, KVHint, Role, ToolCall
from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler.kv_lifecycle import (
    AgentServeLifecycle,
    KeepResident,
    OffloadOnly,
    TokenCakeLifecycle,
    TTLPin,
)
from agentserve.scheduler.kv_parking import KVParking
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.router import LeastLoadedRouter
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tool_durations import ToolDurationModel
from tests.unit.scheduler.fakes import BLOCK_SIZE, FINGERPRINT, status

pytestmark = pytest.mark.unit

HISTORY = list(range(100, 111))  # 11 tokens: 2 full blocks of 4
IDS = block_ids_for(HISTORY, BLOCK_SIZE, FINGERPRINT, "t")


class FakeMoves:
    def __init__(self, fail: bool = False, gone: tuple[str, ...] = ()) -> None:
        self.calls: list[tuple[str, str, list[bytes]]] = []
        self.fail = fail
        self.gone = gone  # addresses of engines that died (still registered)

    async def drop_kv(self, address, block_ids):
        self.calls.append(("drop", address, block_ids))
        if self.fail:
            raise ConnectionError("engine gone")
        return len(block_ids)

    async def prefetch_kv(self, address, block_ids):
        self.calls.append(("prefetch", address, block_ids))
        if address in self.gone:
            raise EngineUnavailable(address, "UNAVAILABLE: connection refused")
        return len(block_ids), 0

    async def hint_kv(self, address, block_ids, hint):
        self.calls.append(("hint", address, block_ids, hint))
        return len(block_ids)


class FakeHints:
    def __init__(self) -> None:
        self.hints: list[tuple[list[bytes], int | None, float | None]] = []

    async def hint(self, block_ids, priority=None, next_use_in_s=None):
        self.hints.append((block_ids, priority, next_use_in_s))
        return len(block_ids)


class Timer:
    """asyncio.sleep stand-in: records each delay and returns when released."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.release = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        await self.release.wait()


def setup(policy=None, moves=None):
    registry = EngineRegistry(5.0)
    registry.register(status("d0", Role.DECODE, 7000, running=3))  # busier: the upload goes to d1
    registry.register(status("d1", Role.DECODE, 7001))
    timer, hints, moves = Timer(), FakeHints(), moves or FakeMoves()
    parking = KVParking(
        policy or AgentServeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5, drop=True),
        ToolDurationModel(default_s=1.0),
        registry,
        moves,
        hints,
        LeastLoadedRouter().pick,
        sleep=timer.sleep,
    )
    session = Session("s1", tenant="t", history=list(HISTORY), kv_holder="d0", turns=1, info=AgentInfo(priority=7))
    return parking, session, moves, hints, timer


def call(call_id="c1", predicted=10.0, actual=0.0, caller=0.0):
    return ToolCall("s1", "search", call_id, 0.0, predicted, actual, caller_predicted_s=caller)


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_long_wait_offloads_then_uploads_to_the_routers_pick_before_the_return():
    async def main():
        parking, session, moves, hints, timer = setup()
        started = call(predicted=10.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        assert moves.calls == [("drop", "127.0.0.1:7000", IDS)]
        assert hints.hints == [(IDS, 7, 10.0)]
        # 2 blocks reload in 0.02 s: the upload starts 1.5 reloads before the predicted return.
        assert timer.delays == [pytest.approx(10.0 - 0.03, abs=0.01)]
        timer.release.set()
        await settle()
        assert moves.calls[1] == ("prefetch", "127.0.0.1:7001", IDS)
        # Pinned there until the predicted return, at the session's priority.
        kind, address, ids, hint = moves.calls[2]
        assert (kind, address, ids, hint.priority) == ("hint", "127.0.0.1:7001", IDS, 7)
        assert hint.pin_s == hint.next_use_in_s == pytest.approx(10.0, abs=0.05)
        assert session.kv_holder == "d1" and not parking.parked("s1")
        finished = call(actual=9.0)
        session.tools.ended(finished)
        parking.finished(session, finished)
        stats = parking.stats
        assert (stats.offloads, stats.uploads, stats.dropped_blocks, stats.uploaded_blocks) == (1, 1, 2, 2)
        assert stats.uploads_cancelled == 0
        assert parking.durations.predict("search") == 9.0

    asyncio.run(main())


def test_an_early_return_cancels_the_upload_and_the_turn_loads_on_demand():
    async def main():
        parking, session, moves, _, timer = setup()
        started = call(caller=20.0)  # the caller's prediction wins over the proxy's
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        assert timer.delays == [pytest.approx(20.0 - 0.03, abs=0.01)]
        finished = call(actual=0.5)
        session.tools.ended(finished)
        parking.finished(session, finished)
        await settle()
        assert [kind for kind, *_ in moves.calls] == ["drop"]
        assert session.kv_holder == "d0" and parking.stats.uploads_cancelled == 1 and not parking.parked("s1")

    asyncio.run(main())


def test_lru_and_short_waits_keep_the_kv():
    async def main():
        for policy, predicted in ((KeepResident(), 600.0), (None, 0.2)):
            parking, session, moves, _, _ = setup(policy)
            started = call(predicted=predicted)
            session.tools.started(started)
            parking.started(session, started)
            await settle()
            assert moves.calls == [] and parking.stats.kept == 1

    asyncio.run(main())


def test_parallel_calls_park_once_and_a_running_turn_is_left_alone():
    async def main():
        parking, session, moves, _, timer = setup()
        for call_id in ("c1", "c2"):
            started = call(call_id)
            session.tools.started(started)
            parking.started(session, started)
        await settle()
        assert [kind for kind, *_ in moves.calls] == ["drop"]
        first = call("c1", actual=1.0)
        session.tools.ended(first)
        parking.finished(session, first)
        assert parking.parked("s1")  # c2 still runs
        await parking.aclose()

        parking, session, moves, _, _ = setup()
        async with session.lock:  # a turn is running on the session: its KV is in use
            started = call()
            session.tools.started(started)
            parking.started(session, started)
            await settle()
        assert moves.calls == []

    asyncio.run(main())


def test_a_failed_move_is_counted_never_raised():
    async def main():
        parking, session, moves, _, _ = setup(moves=FakeMoves(fail=True))
        started = call()
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        assert parking.stats.failures == 1 and parking.stats.offloads == 0
        await parking.aclose()

    asyncio.run(main())


def test_a_turn_before_the_upload_makes_it_moot():
    async def main():
        parking, session, moves, _, timer = setup()
        started = call()
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        session.commit(HISTORY + [1, 2, 3], kv_holder="d0")  # a turn ran (the call is still pending)
        timer.release.set()
        await settle()
        assert [kind for kind, *_ in moves.calls] == ["drop"] and session.kv_holder == "d0"

    asyncio.run(main())


def test_an_upload_target_found_dead_is_passed_over():
    async def main():
        parking, session, moves, _, timer = setup(moves=FakeMoves(gone=("127.0.0.1:7001",)))
        started = call()
        session.tools.started(started)
        parking.started(session, started)
        timer.release.set()
        await settle()
        assert [(kind, address) for kind, address, *_ in moves.calls] == [
            ("drop", "127.0.0.1:7000"),
            ("prefetch", "127.0.0.1:7001"),  # the router's pick, dead
            ("prefetch", "127.0.0.1:7000"),
            ("hint", "127.0.0.1:7000"),
        ]
        assert session.kv_holder == "d0" and parking.stats.uploads == 1 and parking.stats.failures == 0

    asyncio.run(main())


def test_ttl_pin_holds_the_kv_in_its_engine_for_the_predicted_wait():
    async def main():
        parking, session, moves, hints, timer = setup(TTLPin())
        started = call(predicted=12.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        assert moves.calls == [("hint", "127.0.0.1:7000", IDS, KVHint(pin_s=12.0))]
        assert (parking.stats.kept, parking.stats.pinned, parking.stats.offloads) == (1, 1, 0)
        assert hints.hints == [] and timer.delays == [] and not parking.parked("s1")

    asyncio.run(main())


def test_offload_drops_on_every_wait_and_never_uploads():
    async def main():
        parking, session, moves, hints, timer = setup(OffloadOnly())
        started = call(predicted=0.1)  # even a short wait
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        assert moves.calls == [("drop", "127.0.0.1:7000", IDS)]
        assert hints.hints == [(IDS, 7, 0.1)] and timer.delays == []
        finished = call(actual=0.1)
        session.tools.ended(finished)
        parking.finished(session, finished)
        assert session.kv_holder == "d0" and parking.stats.uploads == 0 and not parking.parked("s1")

    asyncio.run(main())


def test_tokencake_uploads_back_into_the_engine_it_left_not_the_routers_pick():
    async def main():
        parking, session, moves, _, timer = setup(TokenCakeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5))
        started = call(predicted=10.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        timer.release.set()
        await settle()
        # The router would pick d1 (d0 is busier); one engine's view goes back to d0.
        assert [(kind, address) for kind, address, *_ in moves.calls] == [
            ("drop", "127.0.0.1:7000"),
            ("prefetch", "127.0.0.1:7000"),
            ("hint", "127.0.0.1:7000"),
        ]
        assert session.kv_holder == "d0" and parking.stats.uploads == 1

    asyncio.run(main())


def test_tokencake_whose_engine_died_loads_on_demand():
    async def main():
        moves = FakeMoves(gone=("127.0.0.1:7000",))
        parking, session, moves, _, timer = setup(TokenCakeLifecycle(0.01), moves)
        started = call(predicted=10.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        timer.release.set()
        await settle()
        assert [kind for kind, *_ in moves.calls] == ["drop", "prefetch"]  # no other engine tried
        assert session.kv_holder == "d0" and parking.stats.uploads == 0

    asyncio.run(main())


def test_agentserve_demotes_rather_than_drops_and_uploads_where_the_kv_still_is():
    async def main():
        parking, session, moves, hints, timer = setup(
            AgentServeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5, drop=False)
        )
        parking.registry.register(status("d0", Role.DECODE, 7000))  # the holder is no busier now
        started = call(predicted=10.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        # Left resident on d0, hinted with its return: evicted first, and only if d0 needs the room.
        ((kind, address, ids, hint),) = moves.calls
        assert (kind, address, ids, hint) == ("hint", "127.0.0.1:7000", IDS, KVHint(7, 10.0))
        assert hints.hints == [(IDS, 7, 10.0)]
        timer.release.set()
        await settle()
        # The upload goes to the engine that still holds it (only what it lost moves), pinned there.
        assert moves.calls[1] == ("prefetch", "127.0.0.1:7000", IDS)
        kind, address, _, pin = moves.calls[2]
        assert (kind, address, pin.priority) == ("hint", "127.0.0.1:7000", 7)
        assert pin.pin_s == pytest.approx(10.0, abs=0.05)
        stats = parking.stats
        assert (stats.offloads, stats.demoted, stats.dropped_blocks, stats.uploads) == (1, 1, 0, 1)
        assert session.kv_holder == "d0"

    asyncio.run(main())


def test_a_demoted_sessions_upload_goes_to_the_routers_pick_when_its_engine_is_busier():
    async def main():
        parking, session, moves, _, timer = setup(
            AgentServeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5, drop=False)
        )
        started = call(predicted=10.0)  # d0, the holder, runs 3 sequences; d1 none
        session.tools.started(started)
        parking.started(session, started)
        timer.release.set()
        await settle()
        assert [c[:2] for c in moves.calls] == [
            ("hint", "127.0.0.1:7000"),
            ("prefetch", "127.0.0.1:7001"),
            ("hint", "127.0.0.1:7001"),
        ]
        assert session.kv_holder == "d1"

    asyncio.run(main())


def test_a_closed_session_drops_its_plan_and_its_kv_loses_the_sessions_priority_and_return():
    async def main():
        parking, session, moves, _, timer = setup()
        started = call(predicted=10.0)
        session.tools.started(started)
        parking.started(session, started)
        await settle()
        parking.closed(session)
        await settle()
        timer.release.set()
        await settle()
        assert not parking.parked("s1")
        # Dropped at the call's start; on close no upload, only the holder told the priority and return are gone.
        assert moves.calls == [
            ("drop", "127.0.0.1:7000", IDS),
            ("hint", "127.0.0.1:7000", IDS, KVHint(priority=0, next_use_in_s=0.0)),
        ]

    asyncio.run(main())
