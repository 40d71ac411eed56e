from collections.abc import Callable

import pytest

from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink, Transfer

GB = 1e9


def _done_at(loop: EventLoop, times: dict[str, float], name: str) -> Callable[[], None]:
    return lambda: times.__setitem__(name, loop.now())


def test_two_equal_transfers_sharing_a_link_end_together_at_twice_the_solo_time() -> None:
    loop = EventLoop()
    link = SharedLink(loop, "snic", 10 * GB)
    times: dict[str, float] = {}
    link.send(1 * GB, _done_at(loop, times, "a"))
    link.send(1 * GB, _done_at(loop, times, "b"))
    loop.run()
    assert times == {"a": 0.2, "b": 0.2}
    assert link.busy_s == 0.2
    assert link.bytes_total == 2 * GB


def test_a_shorter_transfer_ends_first_and_the_other_then_takes_the_whole_rate() -> None:
    loop = EventLoop()
    link = SharedLink(loop, "snic", 10 * GB)
    times: dict[str, float] = {}
    link.send(1 * GB, _done_at(loop, times, "big"))
    link.send(0.5 * GB, _done_at(loop, times, "small"))
    loop.run()
    # Both at 5 GB/s until the small one's 0.5 GB are moved (0.1 s), then 0.5 GB at 10 GB/s.
    assert times["small"] == pytest.approx(0.1, rel=1e-12)
    assert times["big"] == pytest.approx(0.15, rel=1e-12)


def test_a_transfer_joining_later_shares_from_when_it_opens() -> None:
    loop = EventLoop()
    link = SharedLink(loop, "snic", 10 * GB)
    times: dict[str, float] = {}
    link.send(1 * GB, _done_at(loop, times, "first"))
    loop.at(0.05, lambda: link.send(1 * GB, _done_at(loop, times, "second")))
    loop.at(0.05, lambda: times.__setitem__("queued_at_join", link.queue_bytes))
    loop.run()
    # 0.5 GB alone by 0.05 s; then 0.5 GB each at 5 GB/s (0.1 s); then the second's last 0.5 GB alone.
    assert times["first"] == pytest.approx(0.15, rel=1e-12)
    assert times["second"] == pytest.approx(0.2, rel=1e-12)
    assert times["queued_at_join"] == 1.5 * GB
    assert link.busy_s == pytest.approx(0.2, rel=1e-12)


def test_a_link_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError, match="bytes_per_s"):
        SharedLink(EventLoop(), "snic", 0)


def test_a_watched_point_fires_when_that_many_bytes_are_moved_under_sharing() -> None:
    loop = EventLoop()
    link = SharedLink(loop, "snic", 10 * GB)
    times: dict[str, float] = {}
    first = link.send(1 * GB, _done_at(loop, times, "first"))
    link.when_moved(first, 0.25 * GB, _done_at(loop, times, "quarter"))
    loop.at(0.01, lambda: link.send(1 * GB, _done_at(loop, times, "second")))
    loop.run()
    # 0.1 GB alone by 0.01 s, then 5 GB/s: the next 0.15 GB take 0.03 s.
    assert times["quarter"] == pytest.approx(0.04, rel=1e-12)
    assert times["first"] == pytest.approx(0.01 + 0.9 * GB / (5 * GB), rel=1e-12)
    assert link.moved(first) == 1 * GB


def test_a_point_already_moved_fires_at_once_and_the_queue_counts_whole_transfers() -> None:
    loop = EventLoop()
    link = SharedLink(loop, "snic", 10 * GB)
    times: dict[str, float] = {}
    transfer = link.send(1 * GB, lambda: None, owner="p0")

    def check() -> None:
        link.when_moved(transfer, 0.1 * GB, _done_at(loop, times, "late watch"))
        times["queued"] = link.queue_bytes_of("p0")

    loop.at(0.05, check)
    loop.run()
    assert times["late watch"] == pytest.approx(0.05, rel=1e-12)
    assert times["queued"] == 0.5 * GB


def _checks(link: SharedLink, transfer: Transfer, nbytes: float, seen: list[bool]) -> Callable[[], None]:
    return lambda: seen.append(link.has_moved(transfer, nbytes))


def test_a_watched_point_counts_as_moved_when_it_fires_on_a_link_that_has_served_for_a_day() -> None:
    # 17.6 TB served: the link's count is spaced 0.004 bytes apart, coarser than RESIDUE_BYTES, so
    # `start + n - start` can fall short of `n`; a caller that re-checks and re-watches (a layerwise
    # prefill's layer group) must see the point as moved, or it watches it again at the same instant
    # for ever.
    loop = EventLoop()
    link = SharedLink(loop, "snic", 6.25 * GB)
    link.send(17_592_949_979_147.555, lambda: None)
    loop.run()
    seen: list[bool] = []
    for nbytes in (758_196_448.5373622, 123_456_789.123, 987_654_321.987, 55_555_555.55):
        transfer = link.send(nbytes, lambda: None)
        for part in (0.25, 0.5, 0.75):
            link.when_moved(transfer, nbytes * part, _checks(link, transfer, nbytes * part, seen))
        loop.run()
    assert seen == [True] * 12
    assert loop.events_run < 100
