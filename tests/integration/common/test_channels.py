"""ChannelCache: one channel per address, retired when its peer is found dead, all closed at the end."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentserve.common.channels import ChannelCache
from agentserve.common.netutil import free_port
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.integration.common.fakes import serving

pytestmark = pytest.mark.integration


async def _open_session(cache: ChannelCache, address: str, tenant: str) -> grpc.StatusCode:
    try:
        async with cache.calling(address) as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            await stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant=tenant), timeout=5)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_one_channel_per_address_until_forgotten_then_a_fresh_one() -> None:
    async def main():
        cache = ChannelCache()
        first = cache.get("127.0.0.1:1")
        again, other = cache.get("127.0.0.1:1"), cache.get("127.0.0.1:2")
        cache.forget("127.0.0.1:1")
        cache.forget("127.0.0.1:3")  # never opened: nothing to retire
        fresh = cache.get("127.0.0.1:1")
        await cache.close()
        return first, again, other, fresh, cache.get("127.0.0.1:1")

    first, again, other, fresh, reopened = asyncio.run(main())
    assert first is again and other is not first
    assert fresh is not first and reopened is not fresh


def test_close_closes_retired_channels_too() -> None:
    async def main():
        cache = ChannelCache()
        retired = cache.get("127.0.0.1:1")
        cache.forget("127.0.0.1:1")
        kept = cache.get("127.0.0.1:1")
        await cache.close()
        closed = []
        for channel in (retired, kept):
            try:
                await scheduler_pb2_grpc.SchedulerStub(channel).ListModels(scheduler_pb2.ListModelsRequest())
            except grpc.aio.UsageError:
                closed.append(True)
        return closed

    assert asyncio.run(main()) == [True, True]


def test_a_peer_found_unavailable_is_forgotten_a_bad_request_is_not() -> None:
    async def main():
        cache = ChannelCache()
        dead = f"127.0.0.1:{free_port()}"
        before = cache.get(dead)
        down = await _open_session(cache, dead, "ok")
        after_down = cache.get(dead)
        async with serving() as address:
            live = cache.get(address)
            bad = await _open_session(cache, address, "value")
            kept = cache.get(address) is live
            gone = await _open_session(cache, address, "retryable")  # the servicer says UNAVAILABLE
            after_gone = cache.get(address) is live
        await cache.close()
        return down, after_down is before, bad, kept, gone, after_gone

    down, same_after_down, bad, kept, gone, same_after_gone = asyncio.run(main())
    assert (down, same_after_down) == (grpc.StatusCode.UNAVAILABLE, False)
    assert (bad, kept) == (grpc.StatusCode.INVALID_ARGUMENT, True)
    assert (gone, same_after_gone) == (grpc.StatusCode.UNAVAILABLE, False)
