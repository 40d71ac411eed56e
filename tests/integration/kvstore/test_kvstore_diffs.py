"""Master + diff storage through a real kvstore process: siblings written as diffs and restored by
the reader, a diff without its master refused, a diff corrupted on disk reported missing."""

import grpc
import pytest

from agentserve.kv.block_diff import restore_block
from agentserve.kv.block_format import serialize_blocks
from agentserve.kvstore.layout import block_path
from tests.integration.kvstore.support import collect, run, start_kvstore
from tests.support.diff_blocks import FP, MASTER_POSITION, SHIFT, family

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kvstore(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("kvstore-diffs")
    service = start_kvstore(
        data_dir, 0, "--dram-budget-bytes", "0", "--ssd-budget-bytes", str(1 << 20), "--max-block-bytes", str(64 << 10)
    )
    service.data_dir = data_dir
    yield service
    assert service.stop() == 0, service.log.read_text()[-3000:]


def as_full(sibling) -> bytes:
    position = MASTER_POSITION + sibling.position_offset
    return bytes(
        serialize_blocks(sibling.k.unsqueeze(1), sibling.v.unsqueeze(1), [sibling.block_id], FP, position=position)
    )


def test_siblings_round_trip_as_diffs_and_bad_or_corrupt_diffs_are_reported(kvstore):
    fam, lone = family(salt="rpc"), family(salt="rpc-lone")
    diffs = [(s.block_id, s.diff) for s in fam.siblings]
    ids = [s.block_id for s in fam.siblings]

    async def scenario(client):
        written = await client.write(FP, [(fam.master_id, fam.master)] + diffs)
        master = (await collect(client.read(FP, [fam.master_id])))[0].data
        read = await collect(client.read(FP, ids))
        restored = [bytes(restore_block(master, r.data, SHIFT)) for r in read]
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.put(FP, [(lone.siblings[0].block_id, lone.siblings[0].diff)])
        path = block_path(kvstore.data_dir, ids[1], diff=True)
        data = bytearray(path.read_bytes())
        data[-1] ^= 0x01
        path.write_bytes(data)
        after_corruption = await collect(client.read(FP, ids))
        stats = await client.stats()
        deleted = await client.delete([fam.master_id])
        left = await client.lookup_tiers([fam.master_id, ids[0], ids[2]])
        return written, [bytes(r.data) for r in read], restored, refused.value, after_corruption, stats, deleted, left

    written, read, restored, refused, after_corruption, stats, deleted, left = run(scenario, kvstore.address)
    assert (written.stored, written.bytes_written) == (4, len(fam.master) + sum(len(d) for _, d in diffs))
    assert read == [d for _, d in diffs]
    assert restored == [as_full(s) for s in fam.siblings]
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"references master {lone.master_id.hex()}, which is not stored" in refused.details()
    assert [bytes(r.data) for r in after_corruption] == [diffs[0][1]]  # the stream ends at the missing block
    assert stats.corrupt_dropped == 1
    assert deleted == 1
    assert left.prefix_blocks == 0 and all(t == 0 for t in left.tiers)  # its mirrors went with the master
    assert kvstore.proc.poll() is None
