"""Crash safety: writers killed with SIGKILL at random points, then every acknowledged block checked."""

import asyncio
import random
import signal

import pytest

from agentserve.bench.micro.kvstore.blocks import BlockMaker, block_id_for
from agentserve.bench.micro.kvstore.crash import run_trials
from agentserve.kvstore.client import KVStoreClient
from tests.integration.kvstore.support import collect, start_kvstore

pytestmark = pytest.mark.integration


def test_200_sigkilled_writers_lose_no_acknowledged_block_and_serve_nothing_partial(tmp_path):
    result = run_trials(tmp_path, trials=200, seed=1)
    # run_trials raises on any lost, partial or undetected corrupt block; these say it really tested that.
    assert result["trials"] == 200 and result["corruptions_detected"] == 20, result
    assert result["killed_mid_stream"] >= 100 and result["acknowledged_blocks"] >= 200, result
    assert result["blocks_listed_and_verified"] >= result["acknowledged_blocks"], result


@pytest.mark.parametrize("group_commit", ["false", "true"])
def test_a_sigkilled_kvstore_keeps_every_acknowledged_write_stream(tmp_path, group_commit):
    maker = BlockMaker("kvstore-crash-service", 64 << 10, num_layers=8)
    acked: dict[bytes, bytes] = {}

    async def write_until_killed(address: str) -> None:
        async with KVStoreClient(address, timeout_s=30) as client:
            for batch in range(1000):
                blocks = [(block_id_for((batch, i), "svc"), b"") for i in range(4)]
                blocks = [(b, maker.make(b)) for b, _ in blocks]
                try:
                    await client.write("kvstore-crash-service", blocks)
                except Exception:  # noqa: BLE001 - the server died mid-stream: not acknowledged
                    return
                acked.update(blocks)

    service = start_kvstore(tmp_path, 0, "--group-commit", group_commit)

    async def main():
        writer = asyncio.create_task(write_until_killed(service.address))
        await asyncio.sleep(random.uniform(0.3, 0.8))
        service.stop(signal.SIGKILL)
        await writer

    asyncio.run(main())
    assert service.proc.returncode == -signal.SIGKILL and acked

    restarted = start_kvstore(tmp_path)
    try:

        async def read_back():
            async with KVStoreClient(restarted.address, timeout_s=30) as client:
                return await collect(client.get("kvstore-crash-service", list(acked)))

        got = asyncio.run(read_back())
    finally:
        assert restarted.stop() == 0
    assert dict(got) == acked
