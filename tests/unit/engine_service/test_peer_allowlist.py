"""PeerAllowList: registered peers pass, others are refused naming the field after one refresh from
the scheduler, concurrent misses share that refresh, a refresh replaces the set, and a scheduler
that cannot be asked leaves the decision to what is known."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.common.errors import PermissionDenied
from agentserve.engine_service.peer_allowlist import PeerAllowList

pytestmark = pytest.mark.unit


class Scheduler:
    """The registered decode engines, counting how often an engine asked for them."""

    def __init__(self, peers: list[str], delay_s: float = 0.0) -> None:
        self.peers = peers
        self.delay_s = delay_s
        self.asked = 0

    async def registered(self) -> list[str]:
        self.asked += 1
        await asyncio.sleep(self.delay_s)
        return list(self.peers)


def test_a_registered_peer_passes_without_asking_and_an_empty_address_is_no_peer() -> None:
    scheduler = Scheduler(["10.0.0.2:50055"])
    allowed = PeerAllowList(scheduler.registered)
    allowed.update(["10.0.0.2:50055"])

    async def main():
        await allowed.check("decode_address", "10.0.0.2:50055")
        await allowed.check("relay_address", "")

    asyncio.run(main())
    assert scheduler.asked == 0


def test_an_unregistered_address_is_refused_naming_the_field_after_one_refresh() -> None:
    scheduler = Scheduler(["10.0.0.2:50055"])
    allowed = PeerAllowList(scheduler.registered)

    async def main():
        with pytest.raises(PermissionDenied) as refused:
            await allowed.check("relay_address", "203.0.113.9:443")
        return refused.value

    refused = asyncio.run(main())
    assert str(refused) == (
        "relay_address '203.0.113.9:443' is not a decode engine registered with the scheduler; "
        "this engine dials only registered peers"
    )
    assert scheduler.asked == 1
    assert allowed.peers == {"10.0.0.2:50055"}  # the refresh was kept


def test_a_peer_registered_since_the_last_heartbeat_passes_after_the_refresh() -> None:
    scheduler = Scheduler(["10.0.0.2:50055", "10.0.0.3:50055"])
    allowed = PeerAllowList(scheduler.registered)
    allowed.update(["10.0.0.2:50055"])

    asyncio.run(allowed.check("decode_address", "10.0.0.3:50055"))
    assert (scheduler.asked, allowed.peers) == (1, {"10.0.0.2:50055", "10.0.0.3:50055"})


def test_concurrent_misses_share_one_refresh() -> None:
    scheduler = Scheduler(["10.0.0.3:50055"], delay_s=0.05)
    allowed = PeerAllowList(scheduler.registered)

    async def main():
        addresses = ["10.0.0.3:50055", "10.0.0.3:50055", "198.51.100.1:1", "10.0.0.3:50055"]
        return await asyncio.gather(*(allowed.check("decode_address", a) for a in addresses), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert [type(o).__name__ for o in outcomes] == ["NoneType", "NoneType", "PermissionDenied", "NoneType"]
    assert scheduler.asked == 1


def test_an_update_replaces_the_set_so_a_dropped_engine_is_no_longer_dialed() -> None:
    allowed = PeerAllowList()
    allowed.update(["10.0.0.2:50055", "10.0.0.3:50055"])
    allowed.update(["10.0.0.3:50055"])

    async def main():
        await allowed.check("decode_address", "10.0.0.3:50055")
        with pytest.raises(PermissionDenied, match="decode_address '10.0.0.2:50055'"):
            await allowed.check("decode_address", "10.0.0.2:50055")

    asyncio.run(main())


def test_a_scheduler_that_cannot_be_asked_leaves_the_known_set() -> None:
    async def unreachable() -> list[str]:
        raise ConnectionRefusedError("scheduler down")

    allowed = PeerAllowList(unreachable)
    allowed.update(["10.0.0.2:50055"])

    async def main():
        await allowed.check("decode_address", "10.0.0.2:50055")
        with pytest.raises(PermissionDenied, match="decode_address '10.0.0.9:1'"):
            await allowed.check("decode_address", "10.0.0.9:1")

    asyncio.run(main())
    assert allowed.peers == {"10.0.0.2:50055"}
