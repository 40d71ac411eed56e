"""The kvstore as a real process on loopback, driven through KVStoreClient."""

import signal
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.kvstore.support import run, start_kvstore
from tests.support.kv_blocks import FP, chain, make_block, payload_offset
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kvstore(tmp_path_factory):
    service = start_kvstore(tmp_path_factory.mktemp("kvstore"), metrics_port=free_port())
    yield service
    assert service.stop() == 0, service.log.read_text()[-3000:]


def serving(address) -> bool:
    with grpc.insecure_channel(address) as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
    return status == health_pb2.HealthCheckResponse.SERVING


async def get_all(client, fingerprint, ids):
    return [item async for item in client.get(fingerprint, ids)]


def test_put_get_lookup_round_trip(kvstore):
    ids = chain(4, salt="round-trip")
    blocks = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]

    async def scenario(client):
        first = await client.put(FP, blocks[:3])
        again = await client.put(FP, blocks[1:3])
        return (
            first,
            again,
            await client.lookup(ids),
            await get_all(client, FP, ids),
            await get_all(client, FP, ids[:2]),
            await client.stats(),
        )

    first, again, prefix, got, got_two, stats = run(scenario, kvstore.address)
    assert (first.stored, first.existing, first.bytes_written) == (3, 0, sum(len(d) for _, d in blocks[:3]))
    assert (again.stored, again.existing, again.bytes_written) == (0, 2, 0)
    assert prefix == 3
    assert got == blocks[:3]  # stops at the first block not stored
    assert got_two == blocks[:2]
    assert stats.blocks >= 3 and stats.hits >= 5


def metric(service, name: str) -> float:
    url = f"http://127.0.0.1:{service.extra_ports['metrics']}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_metrics_count_rpc_outcomes(kvstore):
    ids = chain(2, salt="metrics")
    blocks = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]
    stored_before = metric(kvstore, 'agentserve_kvstore_put_blocks_total{outcome="stored"}')
    misses_before = metric(kvstore, 'agentserve_kvstore_get_blocks_total{outcome="miss"}')

    async def scenario(client):
        await client.put(FP, blocks[:1])
        return await get_all(client, FP, ids)

    assert run(scenario, kvstore.address) == blocks[:1]
    assert metric(kvstore, 'agentserve_kvstore_put_blocks_total{outcome="stored"}') == stored_before + 1
    assert metric(kvstore, 'agentserve_kvstore_get_blocks_total{outcome="miss"}') == misses_before + 1
    assert metric(kvstore, "agentserve_kvstore_blocks") >= 1


def test_bad_input_is_invalid_argument_and_the_service_stays_up(kvstore):
    ids = chain(3, salt="bad-input")
    good = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]
    corrupt = bytearray(good[1][1])
    corrupt[payload_offset(good[1][1])] ^= 0x01

    async def expect_invalid(call):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return info.value.details()

    async def scenario(client):
        messages = {
            "empty": await expect_invalid(client.put("", good)),
            "corrupt": await expect_invalid(client.put(FP, [good[0], (ids[1], bytes(corrupt)), good[2]])),
            "fingerprint": await expect_invalid(client.put("other-model", good)),
            "get-empty": await expect_invalid(get_all(client, "", ids)),
        }
        after_corrupt = await client.lookup(ids)
        unknown = await get_all(client, FP, chain(2, salt="never-stored"))
        later = await client.put(FP, good)
        return messages, after_corrupt, unknown, later, await get_all(client, FP, ids)

    messages, after_corrupt, unknown, later, got = run(scenario, kvstore.address)
    assert "model_fingerprint must not be empty" in messages["empty"]
    assert "block 1 of 3" in messages["corrupt"] and "layer 1 checksum mismatch" in messages["corrupt"]
    assert "block 0 of 3" in messages["fingerprint"] and "other-model" in messages["fingerprint"]
    assert "model_fingerprint must not be empty" in messages["get-empty"]
    assert after_corrupt == 1  # the block before the bad one was stored, nothing after it
    assert unknown == []
    assert (later.stored, later.existing) == (2, 1)
    assert got == good
    assert serving(kvstore.address)
    assert kvstore.proc.poll() is None


def test_acknowledged_blocks_survive_sigkill(tmp_path):
    ids = chain(5, salt="crash")
    blocks = [(block_id, make_block(block_id, seed=i)) for i, block_id in enumerate(ids)]
    service = start_kvstore(tmp_path)
    try:
        response = run(lambda client: client.put(FP, blocks), service.address)
        assert response.stored == 5
    finally:
        service.stop(signal.SIGKILL)
    assert service.proc.returncode == -signal.SIGKILL

    restarted = start_kvstore(tmp_path)
    try:

        async def scenario(client):
            return await client.lookup(ids), await get_all(client, FP, ids), await client.stats()

        prefix, got, stats = run(scenario, restarted.address)
    finally:
        assert restarted.stop() == 0
    assert prefix == 5 and got == blocks
    assert (stats.blocks, stats.bytes) == (5, sum(len(d) for _, d in blocks))
