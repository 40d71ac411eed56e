"""Path B's decode side (`RelaySender`) on a real engine, with a stand-in for the store client.

The race it guards: the relay imports a run of store blocks into the decode's pool and exports it
later, while the engine keeps allocating for other sequences. Pinned, no block can be evicted in
between, so the relay never stops short under load; and every pin is released when it ends.
"""

from __future__ import annotations

import asyncio

import pytest

from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.relay import RelaySender
from agentserve.fabric.chunks import RunAssembler
from tests.support.engine_pool import CONFIG, Store, evict_everything_evictable

pytestmark = pytest.mark.unit


def run_relay(source, held: int, consume):
    """Relay the source's blocks from a fresh decode engine holding the first `held` of them."""
    src_engine, ids, datas = source
    decode = AsyncEngine(LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG))
    decode.start()
    try:

        async def main():
            await decode.call(lambda e: sum(e.import_blocks(datas[b]) for b in ids[:held]))
            pressure_done = asyncio.Event()

            async def pressure():
                await decode.call(evict_everything_evictable)
                pressure_done.set()

            store = Store({b: datas[b] for b in ids[held:]}, at_end=pressure)
            sender = RelaySender(KVMover(decode, "decode-0", store, "store:0"))
            out = await consume(sender.relay(ids, "prefill-0"), pressure_done)
            stats = await decode.call(lambda e: (e.blocks.stats(), e.blocks.cached_prefix(ids)))
            return out, stats

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


@pytest.mark.parametrize("held", [0, 4])
def test_a_relay_under_eviction_pressure_delivers_every_block_and_releases_its_pins(source, held):
    src_engine, ids, datas = source

    async def consume(relay, pressure_done):
        chunks = [await relay.__anext__()]
        # The store leg runs on: it imports the second run, then the pool is swept of every block
        # an allocation may evict, before the sender gets to export that run.
        await pressure_done.wait()
        chunks += [chunk async for chunk in relay]
        return chunks

    chunks, (stats, resident) = run_relay(source, held, consume)
    receiver = LLMEngine(src_engine.model, src_engine.fingerprint, CONFIG)
    for run in runs_of(chunks):
        receiver.import_blocks(run)
    assert receiver.blocks.cached_prefix(ids) == len(ids)  # every block arrived, checksums verified
    assert all(bytes(receiver.export_blocks([b])) == datas[b] for b in ids)  # bit-exact
    assert stats["used"] == 0  # every pin released
    assert resident == len(ids)  # and the decode keeps the blocks for the suffix-only handoff


def test_a_relay_closed_early_releases_its_pins(source):
    async def consume(relay, pressure_done):
        await relay.__anext__()
        await relay.aclose()  # the store leg is cancelled wherever it is
        return None

    _, (stats, _) = run_relay(source, 4, consume)
    assert stats["used"] == 0
