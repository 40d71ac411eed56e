import pytest

from agentserve.sim.events import EventLoop


def test_events_run_in_time_order_and_ties_in_scheduling_order() -> None:
    loop = EventLoop()
    seen: list[tuple[float, str]] = []
    loop.at(2.0, lambda: seen.append((loop.now(), "late")))
    loop.at(1.0, lambda: seen.append((loop.now(), "first")))
    loop.at(1.0, lambda: seen.append((loop.now(), "second")))
    loop.run()
    assert seen == [(1.0, "first"), (1.0, "second"), (2.0, "late")]
    assert loop.events_run == 3


def test_an_event_may_schedule_more_and_run_stops_at_until() -> None:
    loop = EventLoop()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(loop.now())
        loop.after(0.5, tick)

    loop.at(0.0, tick)
    loop.run(until=1.2)
    assert ticks == [0.0, 0.5, 1.0]
    assert loop.now() == 1.2
    assert loop.pending == 1


def test_scheduling_in_the_past_is_an_error() -> None:
    loop = EventLoop()
    loop.at(1.0, lambda: None)
    loop.run()
    with pytest.raises(ValueError, match="before now"):
        loop.at(0.5, lambda: None)
    with pytest.raises(ValueError, match="delay"):
        loop.after(-1.0, lambda: None)
