"""The tiered store's RPCs (Write, Read, Lookup tiers, Pin/Unpin, Hint, Delete, Stats) and bad input,
against a real kvstore process with small budgets."""

import grpc
import pytest
import torch

from agentserve.kv.block_format import decode_layers, deserialize_blocks, read_header, serialize_blocks
from agentserve.kvstore.types import Tier
from tests.integration.kvstore.support import collect, run, start_kvstore
from tests.support.kv_blocks import FP, block_size, chain, make_block

pytestmark = pytest.mark.integration

MAX_BLOCK = 16 << 10


@pytest.fixture(scope="module")
def kvstore(tmp_path_factory):
    service = start_kvstore(
        tmp_path_factory.mktemp("kvstore-rpcs"),
        0,
        "--dram-budget-bytes",
        str(2 * block_size()),
        "--ssd-budget-bytes",
        str(1 << 20),
        "--max-block-bytes",
        str(MAX_BLOCK),
    )
    yield service
    assert service.stop() == 0, service.log.read_text()[-3000:]


def blocks_for(salt: str, n: int) -> list[tuple[bytes, bytes]]:
    return [(b, make_block(b, seed=i)) for i, b in enumerate(chain(n, salt=salt))]


async def stream(blocks):
    for block in blocks:
        yield block


def test_write_stream_then_read_layers_with_tiers(kvstore):
    blocks = blocks_for("write-read", 3)
    ids = [b for b, _ in blocks]

    async def scenario(client):
        written = await client.write(FP, stream(blocks))
        again = await client.write(FP, blocks[:1])
        found = await client.lookup_tiers(ids + chain(1, salt="absent"))
        whole = await collect(client.read(FP, ids[1:])) + await collect(client.read(FP, ids[:1]))
        layers = await collect(client.read(FP, ids[1:], range(1, 3)))
        return written, again, found, whole, layers

    written, again, found, whole, layers = run(scenario, kvstore.address)
    assert (written.stored, written.existing, written.bytes_written) == (3, 0, 3 * block_size())
    assert (again.stored, again.existing) == (0, 1)
    assert found.prefix_blocks == 3 and found.tiers == (Tier.SSD, Tier.DRAM, Tier.DRAM, Tier.NONE)
    assert [(r.block_id, r.data, r.tier) for r in whole] == [(b, d, Tier.DRAM) for b, d in blocks[1:]] + [
        (ids[0], blocks[0][1], Tier.SSD)
    ]
    for read, (_, data) in zip(layers, blocks[1:]):
        assert (read.layers, read.num_layers) == (range(1, 3), 3)
        part = decode_layers(read_header(read.data), memoryview(read.data)[read.header_size :], read.layers, None, FP)
        assert torch.equal(part.k, deserialize_blocks(data, FP, layers=range(1, 3)).k)


def test_pin_hint_delete_and_stats(kvstore):
    blocks = blocks_for("lifecycle", 2)
    ids = [b for b, _ in blocks]
    absent = chain(1, salt="never")

    async def scenario(client):
        await client.put(FP, blocks)
        pinned = await client.pin(ids + absent, ttl_s=30)
        pinned_stats = await client.stats()
        unpinned = await client.unpin(ids)
        hinted = await client.hint(ids + absent, priority=2, next_use_in_s=5)
        deleted = await client.delete(ids[:1] + absent)
        return pinned, pinned_stats, unpinned, hinted, deleted, await client.lookup_tiers(ids), await client.stats()

    pinned, pinned_stats, unpinned, hinted, deleted, after, stats = run(scenario, kvstore.address)
    assert (pinned, pinned_stats.pinned_blocks, unpinned, hinted, deleted) == (2, 2, 2, 2, 1)
    assert after.tiers[0] is Tier.NONE and after.tiers[1] is not Tier.NONE
    dram, ssd = stats.tiers
    assert (dram.tier, dram.budget_bytes) == (Tier.DRAM, 2 * block_size())
    assert (ssd.tier, ssd.budget_bytes) == (Tier.SSD, 1 << 20)
    assert dram.bytes <= dram.budget_bytes and dram.peak_bytes <= dram.budget_bytes and ssd.peak_bytes <= 1 << 20
    assert stats.blocks == ssd.blocks and stats.write_bytes > 0 and stats.write_bytes_per_s > 0


def oversize_block(block_id: bytes) -> bytes:
    k = torch.randn(3, 1, 128, 2, 8)
    data = bytes(serialize_blocks(k, k, [block_id], FP))
    assert len(data) > MAX_BLOCK
    return data


def test_bad_input_gets_clear_errors_and_loses_nothing(kvstore):
    blocks = blocks_for("bad-input", 3)
    ids = [b for b, _ in blocks]
    other_model = chain(1, salt="other")[0]

    async def expect_invalid(call):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return info.value.details()

    async def mixed_stream():
        yield blocks[2]
        yield (other_model, make_block(other_model, fingerprint="other-model"))

    async def scenario(client):
        await client.write(FP, blocks[:2])
        errors = {
            "malformed id": await expect_invalid(collect(client.read(FP, [ids[0], b"short"]))),
            "layers beyond": await expect_invalid(collect(client.read(FP, ids, range(2, 9)))),
            "empty layers": await expect_invalid(collect(client.read(FP, ids, range(2, 2)))),
            "oversize": await expect_invalid(client.put(FP, [(ids[2], oversize_block(ids[2]))])),
            "oversize stream": await expect_invalid(client.write(FP, [blocks[2], (ids[2], oversize_block(ids[2]))])),
            "other model put": await expect_invalid(client.put(FP, [(other_model, make_block(other_model, "m2"))])),
            "other model read": await expect_invalid(collect(client.read("other-model", ids))),
            "other model stream": await expect_invalid(client.write(FP, mixed_stream())),
            "no fingerprint": await expect_invalid(client.write("", blocks[:1])),
        }
        unknown = (
            await collect(client.read(FP, chain(2, salt="unknown"))),
            await client.lookup(chain(2, salt="u")),
            await client.pin(chain(1, salt="u"), 5),
            await client.delete(chain(1, salt="u")),
        )
        return errors, unknown, await collect(client.read(FP, ids)), await client.stats()

    errors, unknown, got, stats = run(scenario, kvstore.address)
    assert "block_ids[1]: block id must be 16 bytes" in errors["malformed id"]
    assert f"block {ids[0].hex()}: layers must be a non-empty range" in errors["layers beyond"]
    assert "within [0, 3), got range(2, 9)" in errors["layers beyond"]
    assert "layer range [2, 2) is empty" in errors["empty layers"]
    assert "block 0 of 1" in errors["oversize"] and f"over the {MAX_BLOCK}-byte limit" in errors["oversize"]
    assert "block 1 (id" in errors["oversize stream"] and "blocks before it are stored" in errors["oversize stream"]
    assert "belongs to model m2, expected " + FP in errors["other model put"]
    assert "belongs to model " + FP + ", expected other-model" in errors["other model read"]
    assert "block 1 (id" in errors["other model stream"] and "expected " + FP in errors["other model stream"]
    assert "model_fingerprint must not be empty" in errors["no fingerprint"]
    assert unknown == ([], 0, 0, 0)
    assert [(r.block_id, r.data) for r in got] == blocks  # the oversize stream stored the good block before it
    assert stats.corrupt_dropped == 0
    assert kvstore.proc.poll() is None
