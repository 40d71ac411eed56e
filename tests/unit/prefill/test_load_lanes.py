"""LoadLanes and the prefill worker's loads: in `fifo` order one load at a time per way in (the
store, each relay), in arrival order, the two ways at once; in `concurrent` order all at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agentserve.contracts import KVPath, LoadPlan
from agentserve.prefill.config import PrefillConfig
from agentserve.prefill.load_lanes import LoadLanes, check_load_order
from agentserve.prefill.worker import PrefillWorker

pytestmark = pytest.mark.unit


def _worker(order: str) -> PrefillWorker:
    # Only what the constructor reads: the pool's size, whether it is layerwise, the block's shape.
    engine = SimpleNamespace(engine=SimpleNamespace(config=SimpleNamespace(layerwise=True)))
    mover = SimpleNamespace(block_bytes=4 << 20, num_layers=4)
    return PrefillWorker(engine, mover, load_order=order)  # type: ignore[arg-type]


class Legs:
    """Fake load legs that log when each part starts and ends and finish when told to."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.done: dict[str, asyncio.Event] = {}

    def _leg(self, name: str) -> asyncio.Event:
        return self.done.setdefault(name, asyncio.Event())

    async def by_a(self, part: list[bytes], at: int) -> int:
        if not part:  # an all-relay plan's store leg
            return 0
        name = f"A:{part[0].decode()}"
        self.log.append(f"+{name}")
        await self._leg(name).wait()
        self.log.append(f"-{name}")
        return len(part)

    async def by_b(self, part: list[bytes], at: int, relay_address: str) -> int:
        name = f"B:{part[0].decode()}@{relay_address}"
        self.log.append(f"+{name}")
        await self._leg(name).wait()
        self.log.append(f"-{name}")
        return len(part)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _run_loads(order: str, plans: list[tuple[str, LoadPlan]]) -> tuple[Legs, list[list[str]]]:
    """Start a `_load` per (turn, plan) in that order; release each leg as it starts, oldest first,
    logging which legs run while each is released."""

    async def go() -> tuple[Legs, list[list[str]]]:
        worker, legs = _worker(order), Legs()
        tasks = []
        for turn, plan in plans:
            ids = [f"{turn}{i}".encode() for i in range(4)]
            tasks.append(asyncio.create_task(worker._load(ids, plan, legs.by_a, legs.by_b)))
            await _settle()
        running_at_each_release = []
        while not all(t.done() for t in tasks):
            running = [e[1:] for e in legs.log if e.startswith("+") and f"-{e[1:]}" not in legs.log]
            running_at_each_release.append(running)
            legs.done[running[0]].set()
            await _settle()
        results = [t.result() for t in tasks]
        assert all(loaded == 4 for _, loaded, _ in results)
        return legs, running_at_each_release

    return asyncio.run(go())


def test_fifo_loads_take_the_store_one_at_a_time_in_arrival_order() -> None:
    plans = [(turn, LoadPlan(KVPath.A)) for turn in ("x", "y", "z")]
    legs, running = _run_loads("fifo", plans)
    assert running == [["A:x0"], ["A:y0"], ["A:z0"]]
    assert legs.log == ["+A:x0", "-A:x0", "+A:y0", "-A:y0", "+A:z0", "-A:z0"]


def test_concurrent_loads_all_start_at_once() -> None:
    plans = [(turn, LoadPlan(KVPath.A)) for turn in ("x", "y", "z")]
    _, running = _run_loads("concurrent", plans)
    assert running[0] == ["A:x0", "A:y0", "A:z0"]


def test_fifo_keeps_the_store_and_each_relay_apart_so_they_overlap() -> None:
    # x reads the store, y relays through d1, z through d2 and w through d1 again (behind y): x, y
    # and z run at once; w waits for y, the one ahead of it on d1, not for x.
    plans = [
        ("x", LoadPlan(KVPath.A)),
        ("y", LoadPlan(KVPath.B, relay_address="d1:1")),
        ("z", LoadPlan(KVPath.B, relay_address="d2:1")),
        ("w", LoadPlan(KVPath.B, relay_address="d1:1")),
    ]
    _, running = _run_loads("fifo", plans)
    assert running[0] == ["A:x0", "B:y0@d1:1", "B:z0@d2:1"]
    assert running[1] == ["B:y0@d1:1", "B:z0@d2:1"]
    assert running[2] == ["B:z0@d2:1", "B:w0@d1:1"]


def test_a_split_reads_both_legs_at_once_and_a_later_split_queues_behind_each() -> None:
    plans = [(turn, LoadPlan(KVPath.SPLIT, relay_address="d1:1", relay_blocks=2)) for turn in ("x", "y")]
    legs, running = _run_loads("fifo", plans)
    assert running[0] == ["A:x0", "B:x2@d1:1"]
    assert running[1] == ["B:x2@d1:1", "A:y0"]  # y's store leg starts once x's has ended
    assert legs.log.index("+B:y2@d1:1") > legs.log.index("-B:x2@d1:1")


def test_a_failed_load_frees_its_lane() -> None:
    async def go() -> list[str]:
        lanes, log = LoadLanes("fifo"), []

        async def load(name: str, fail: bool) -> None:
            async with lanes.lane("store"):
                log.append(name)
                if fail:
                    raise OSError("store down")

        first = asyncio.create_task(load("x", True))
        second = asyncio.create_task(load("y", False))
        await asyncio.gather(first, second, return_exceptions=True)
        assert isinstance(first.exception(), OSError)
        async with asyncio.timeout(1), lanes.lane("store"):  # free again: taken at once
            log.append("z")
        return log

    assert asyncio.run(go()) == ["x", "y", "z"]


def test_a_load_order_is_checked_by_name() -> None:
    assert check_load_order("fifo") == "fifo"
    with pytest.raises(ValueError, match="load_order must be one of fifo, concurrent, got 'lifo'"):
        LoadLanes("lifo")
    with pytest.raises(ValueError, match="load_order must be one of"):
        PrefillConfig(load_order="parallel")
    assert PrefillConfig().load_order == "concurrent"  # why: prefill/load_lanes.py


def test_an_all_relay_load_does_not_wait_for_the_store() -> None:
    async def go() -> None:
        worker, legs = _worker("fifo"), Legs()
        by_store = asyncio.create_task(worker._load([b"x0"], LoadPlan(KVPath.A), legs.by_a, legs.by_b))
        await _settle()
        relayed = asyncio.create_task(
            worker._load([b"y0"], LoadPlan(KVPath.B, relay_address="d1:1"), legs.by_a, legs.by_b)
        )
        await _settle()
        legs.done["B:y0@d1:1"].set()
        await _settle()
        assert relayed.done() and relayed.result() == (KVPath.B, 1, 1)
        assert not by_store.done()  # the store is still x's
        legs.done["A:x0"].set()
        assert await by_store == (KVPath.A, 1, 0)

    asyncio.run(go())
