"""Path B's decode side (`RelaySender`) on a real engine, with a stand-in for the store client.

A relay reads every block it relays from the store (DualPath's path B), whatever the decode engine
holds, and sends the bytes as read without waiting for the engine thread; it keeps what it read
(imported on the side) for the suffix-only handoff. With `hbm_first` the leading blocks it holds
go from its HBM and only the rest are read.

The race it guards: a held block is exported later than it is found, while the engine keeps
allocating for other sequences. Pinned, no block can be evicted in between, so the relay never
stops short under load; and every pin is released when it ends.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.relay import RelaySender
from agentserve.fabric.chunks import RunAssembler
from agentserve.kv.block_header import read_header
from tests.support.engine_pool import CONFIG, Store, evict_everything_evictable

pytestmark = pytest.mark.unit


class ReadCountingStore(Store):
    """`Store` that counts the blocks it served."""

    def __init__(self, blocks, at_end) -> None:
        super().__init__(blocks, at_end)
        self.served = 0

    async def get(self, fingerprint, ids):
        async for block_id, data in super().get(fingerprint, ids):
            self.served += 1
            yield block_id, data


def run_relay(source, held: int, consume, hbm_first: bool = False, pressure: bool = True, imported=None):
    """Relay the source's blocks from a fresh decode engine holding the first `held` of them; the
    store holds every block and, with `pressure`, once it served the last one the pool is swept of
    every block an allocation may evict. Returns (consume's result, (pool stats, blocks resident),
    blocks read). `imported`, a list: gets the block ids of every buffer the decode engine imports."""
    src_engine, ids, datas = source
    engine = LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG)
    if imported is not None:
        import_blocks = engine.import_blocks

        def recording(data):
            imported.extend(read_header(data).block_ids)
            return import_blocks(data)

        engine.import_blocks = recording  # type: ignore[method-assign]
    decode = AsyncEngine(engine)
    decode.start()
    try:
        sweep = pressure

        async def main():
            await decode.call(lambda e: sum(e.import_blocks(datas[b]) for b in ids[:held]))
            pressure_done = asyncio.Event()

            async def pressure():
                await decode.call(evict_everything_evictable)
                pressure_done.set()

            store = ReadCountingStore(dict(datas), at_end=pressure if sweep else None)
            sender = RelaySender(KVMover(decode, "decode-0", store, "store:0"))
            out = await consume(sender.relay(ids, "prefill-0", hbm_first), pressure_done)
            stats = await decode.call(lambda e: (e.blocks.stats(), e.blocks.cached_prefix(ids)))
            return out, stats, store.served

        return asyncio.run(main())
    finally:
        decode.stop()


def runs_of(chunks) -> list[bytes]:
    runs: dict[int, RunAssembler] = {}
    for chunk in chunks:
        if chunk.run_header:
            runs[chunk.run] = RunAssembler(chunk.run_header)
        runs[chunk.run].add(chunk.offset, chunk.data)
    assert all(r.complete for r in runs.values())
    return [bytes(runs[i].buffer) for i in sorted(runs)]


@pytest.mark.parametrize(("held", "hbm_first"), [(0, False), (4, False), (4, True)])
def test_a_relay_under_eviction_pressure_delivers_every_block_and_releases_its_pins(source, held, hbm_first):
    src_engine, ids, datas = source

    async def consume(relay, pressure_done):
        chunks = [await relay.__anext__()]
        # The store leg runs on to its end, then the pool is swept of every block an allocation may
        # evict, before the sender gets to the rest (held blocks it exports from the pool).
        await pressure_done.wait()
        chunks += [chunk async for chunk in relay]
        return chunks

    chunks, (stats, _), read = run_relay(source, held, consume, hbm_first)
    assert_delivered(src_engine, ids, datas, chunks)
    assert stats["used"] == 0  # every pin released
    # Every block crossed the storage NIC, the held ones too, unless they may go from HBM.
    assert read == len(ids) - (held if hbm_first else 0)


def assert_delivered(src_engine, ids, datas, chunks) -> None:
    receiver = LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG)
    for run in runs_of(chunks):
        receiver.import_blocks(run)
    assert receiver.blocks.cached_prefix(ids) == len(ids)  # every block arrived, checksums verified
    assert all(bytes(receiver.export_blocks([b])) == datas[b] for b in ids)  # bit-exact


@pytest.mark.parametrize(("held", "hbm_first"), [(4, False), (4, True)])
def test_a_relay_keeps_every_block_it_relays_for_the_suffix_only_handoff(source, held, hbm_first):
    async def consume(relay, _):
        return [chunk async for chunk in relay]

    imported: list[bytes] = []
    _, (stats, resident), _ = run_relay(source, held, consume, hbm_first, pressure=False, imported=imported)
    ids = source[1]
    assert (stats["used"], resident) == (0, len(ids))
    # The blocks it held already are not imported again (their bytes are not even decoded).
    assert imported == ids  # the setup's import of the held ones, then the relay's of the rest


def test_a_relay_sends_every_block_while_the_engine_thread_is_busy(source):
    # The engine thread is held (a decode step that lasts) until the prefill has every block: the
    # store read and the send never wait for it. Only keeping them does, before the stream ends.
    src_engine, ids, datas = source
    decode = AsyncEngine(LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG))
    decode.start()
    step_over = threading.Event()
    try:

        async def main():
            decode.post(lambda e: step_over.wait(30))
            relay = RelaySender(KVMover(decode, "decode-0", Store(dict(datas)), "store:0")).relay(ids, "prefill-0")
            # One run per block, one chunk per run (a block is far below the chunk size).
            chunks = [await asyncio.wait_for(relay.__anext__(), 10) for _ in ids]
            assert_delivered(src_engine, ids, datas, chunks)
            step_over.set()
            assert [chunk async for chunk in relay] == []
            return await decode.call(lambda e: e.blocks.cached_prefix(ids))

        assert asyncio.run(main()) == len(ids)
    finally:
        step_over.set()
        decode.stop()


def test_a_relay_closed_early_releases_its_pins(source):
    async def consume(relay, pressure_done):
        await relay.__anext__()
        await relay.aclose()  # the store leg is cancelled wherever it is
        return None

    _, (stats, _), _ = run_relay(source, 4, consume, hbm_first=True)
    assert stats["used"] == 0
