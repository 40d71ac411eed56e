from collections.abc import Callable

import pytest

from agentserve.sim.events import EventLoop
from agentserve.sim.nic import SharedLink

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
