"""The store's read and write streams: one implementation for in-process callers and the servicer,
tested here without gRPC."""

import asyncio
import threading

import pytest

from agentserve.kvstore import streams
from agentserve.kvstore.blockfile import LayerRangeError
from agentserve.kvstore.ssd import BlockRejectedError
from agentserve.kvstore.types import NOT_CACHED, WriteResult
from tests.support.kv_blocks import FP, block_size, make_block, payload_offset

pytestmark = pytest.mark.unit

SIZE = block_size()


def put(store, blocks, *names):
    store.put_many(FP, [blocks[n] for n in names])


async def consume(stream, into: list) -> None:
    async for read in stream:
        into.append(read)


def record_reads(store, blocks, monkeypatch, cold=(), fail=()):
    """Log each `store.read` as (name, nowait, on the main thread); `cold` blocks are NOT_CACHED
    to a nowait read, `fail` blocks raise to a blocking one."""
    names = {block_id: name for name, (block_id, _) in blocks.items()}
    calls = []
    read = store.read

    def logged(block_id, fingerprint=None, layers=None, nowait=False):
        name = names[block_id]
        calls.append((name, nowait, threading.current_thread() is threading.main_thread()))
        if nowait and name in cold:
            return NOT_CACHED
        if not nowait and name in fail:
            raise ValueError(f"{name} failed")
        return read(block_id, fingerprint, layers, nowait)

    monkeypatch.setattr(store, "read", logged)
    return calls


WARM_IN_PLACE_THEN_A_COLD_BATCH_IN_A_THREAD = [("a", True, True), ("b", True, True)] + [
    (n, False, False) for n in "bcde"
]
ALL_BLOCKING_IN_THE_CALLER = [(n, False, True) for n in "abcde"]


@pytest.mark.parametrize(
    "on_event_loop, expected_calls",
    [(True, WARM_IN_PLACE_THEN_A_COLD_BATCH_IN_A_THREAD), (False, ALL_BLOCKING_IN_THE_CALLER)],
)
def test_one_stream_serves_an_event_loop_and_an_in_process_caller_with_the_same_advice(
    open_store, blocks, monkeypatch, on_event_loop, expected_calls
):
    store = open_store()
    put(store, blocks, "a", "b", "c", "d")
    advised = []
    monkeypatch.setattr(store.ssd, "prefetch", advised.extend)
    calls = record_reads(store, blocks, monkeypatch, cold="b")
    stream, got = store.read_stream([blocks[n][0] for n in "abcde"], FP), []
    if on_event_loop:
        asyncio.run(consume(stream, got))
    else:
        got.extend(stream)
    assert [r.data for r in got] == [blocks[n][1] for n in "abcd"] and stream.missed
    assert calls == expected_calls
    assert advised == [blocks[n][0] for n in "abcd"]  # up to the first id not stored
    complete = store.read_stream([blocks[n][0] for n in "ab"], FP)
    assert len(list(complete)) == 2 and not complete.missed


def test_a_failed_read_is_raised_after_the_blocks_before_it(open_store, blocks, monkeypatch):
    store = open_store()
    put(store, blocks, "a", "b", "c", "d")
    record_reads(store, blocks, monkeypatch, cold="b", fail="c")
    got = []
    with pytest.raises(ValueError, match="c failed"):
        asyncio.run(consume(store.read_stream([blocks[n][0] for n in "abcd"], FP), got))
    assert [r.data for r in got] == [blocks["a"][1], blocks["b"][1]]


@pytest.mark.parametrize("layers", [range(2, 2), slice(2, 1)])
def test_an_empty_layer_range_is_refused_before_any_read(open_store, blocks, layers):
    store = open_store()
    with pytest.raises(LayerRangeError, match=f"layer range \\[2, {layers.stop}\\) is empty"):
        store.read_stream([blocks["a"][0]], FP, layers)


def test_a_write_stream_commits_in_batches_under_the_first_blocks_fingerprint(open_store, blocks, monkeypatch):
    monkeypatch.setattr(streams, "WRITE_BATCH_BLOCKS", 2)
    store = open_store()
    put(store, blocks, "b")

    async def source():
        yield FP, *blocks["a"]
        for name in "bcd":
            yield "", *blocks[name]

    batches = []
    result = asyncio.run(store.write_stream(source(), on_batch=batches.append))
    assert result == WriteResult(3, 1, 3 * SIZE)
    assert batches == [WriteResult(1, 1, SIZE), WriteResult(2, 0, 2 * SIZE)]
    assert store.lookup([blocks[n][0] for n in "abcd"]).prefix_blocks == 4


def test_a_write_stream_stops_at_a_bad_block_with_the_blocks_before_it_stored(open_store, blocks, monkeypatch):
    monkeypatch.setattr(streams, "WRITE_BATCH_BLOCKS", 1)
    store = open_store()
    corrupt = bytearray(blocks["b"][1])
    corrupt[payload_offset(blocks["b"][1])] ^= 1

    async def source():
        for fingerprint, (block_id, data) in [
            (FP, blocks["a"]),
            ("", (blocks["b"][0], bytes(corrupt))),
            ("", blocks["c"]),
        ]:
            yield fingerprint, block_id, data

    with pytest.raises(BlockRejectedError, match="block 1 \\(id .*layer 1 checksum mismatch") as info:
        asyncio.run(store.write_stream(source()))
    assert info.value.index == 1
    assert [t.name for t in store.lookup([blocks[n][0] for n in "abc"]).tiers] == ["SSD", "NONE", "NONE"]


def test_a_write_stream_refuses_a_second_fingerprint(open_store, blocks):
    store = open_store()
    other = make_block(blocks["b"][0], fingerprint="other-model")

    async def source():
        yield FP, *blocks["a"]
        yield "other-model", blocks["b"][0], other

    with pytest.raises(ValueError, match="block 1: model_fingerprint 'other-model' differs from the stream's"):
        asyncio.run(store.write_stream(source()))
    assert store.lookup([blocks["a"][0]]).prefix_blocks == 0  # its batch was never committed
