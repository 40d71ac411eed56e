"""EngineRegistry: heartbeats and timeouts on a fake clock, one model for all engines."""

from __future__ import annotations

import pytest

from agentserve.scheduler.registry import EngineRegistry, EngineStatus, Role
from tests.unit.scheduler.fakes import status

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def registry(clock: Clock) -> EngineRegistry:
    return EngineRegistry(timeout_s=5.0, clock=clock)


def ids(engines) -> list[str]:
    return [e.engine_id for e in engines]


def test_register_and_alive_by_role(registry: EngineRegistry) -> None:
    registry.register(status("d1", Role.DECODE, 7001))
    registry.register(status("p0", Role.PREFILL, 6000))
    registry.register(status("d0", Role.DECODE, 7000))
    assert ids(registry.alive(Role.DECODE)) == ["d0", "d1"]
    assert ids(registry.alive(Role.PREFILL)) == ["p0"]
    assert (registry.fingerprint, registry.block_size) == ("fp-test", 4)


def test_silent_engine_stops_routing_then_expires(registry: EngineRegistry, clock: Clock) -> None:
    registry.register(status("d0", Role.DECODE, 7000))
    registry.register(status("d1", Role.DECODE, 7001))
    clock.now += 4.0
    assert registry.heartbeat(status("d1", Role.DECODE, 7001, running=3))
    clock.now += 1.5  # d0 last heard 5.5 s ago, d1 1.5 s ago
    assert ids(registry.alive(Role.DECODE)) == ["d1"]  # stale d0 never routes, even before a sweep
    assert registry.get("d0") is not None
    assert registry.expire() == ["d0"]
    assert registry.get("d0") is None
    assert registry.get("d1").status.running == 3


def test_engine_at_exactly_the_timeout_is_alive(registry: EngineRegistry, clock: Clock) -> None:
    registry.register(status("d0", Role.DECODE, 7000))
    clock.now += 5.0
    assert ids(registry.alive(Role.DECODE)) == ["d0"]
    assert registry.expire() == []


def test_heartbeat_of_unknown_engine_says_unknown(registry: EngineRegistry) -> None:
    assert registry.heartbeat(status("d0", Role.DECODE, 7000)) is False
    registry.register(status("d0", Role.DECODE, 7000))
    assert registry.mark_dead("d0") is True
    assert registry.heartbeat(status("d0", Role.DECODE, 7000)) is False
    assert registry.mark_dead("d0") is False


def test_other_model_or_block_size_is_refused(registry: EngineRegistry) -> None:
    registry.register(status("p0", Role.PREFILL, 6000))
    with pytest.raises(ValueError, match="serves model other-model"):
        registry.register(status("d0", Role.DECODE, 7000, model_fingerprint="other-model"))
    with pytest.raises(ValueError, match="block size 16"):
        registry.register(status("d0", Role.DECODE, 7000, block_size=16))
    assert ids(registry.alive(Role.DECODE)) == []


def test_model_stays_pinned_after_every_engine_left(registry: EngineRegistry) -> None:
    registry.register(status("p0", Role.PREFILL, 6000))
    registry.mark_dead("p0")
    with pytest.raises(ValueError, match="serves model"):
        registry.register(status("p0", Role.PREFILL, 6000, model_fingerprint="other-model"))


def test_heartbeat_with_another_model_forces_reregistration(registry: EngineRegistry) -> None:
    registry.register(status("p0", Role.PREFILL, 6000))
    assert registry.heartbeat(status("p0", Role.PREFILL, 6000, model_fingerprint="other")) is False
    assert registry.get("p0") is None


def test_reregistration_keeps_inflight_count(registry: EngineRegistry) -> None:
    registry.register(status("d0", Role.DECODE, 7000))
    engine = registry.get("d0")
    with registry.track(engine):
        registry.register(status("d0", Role.DECODE, 7000, running=2))
        assert registry.get("d0") is engine and engine.inflight == 1
    assert engine.inflight == 0 and engine.status.running == 2


def test_limits_are_the_tightest_engine(registry: EngineRegistry) -> None:
    assert registry.limits() is None
    registry.register(status("p0", Role.PREFILL, 6000, max_context=4096))
    registry.register(status("d0", Role.DECODE, 7000, max_context=2048, vocab_size=9000))
    assert registry.limits() == (8192, 2048)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(address="nowhere"), "host:port"),
        (dict(model_fingerprint=""), "model_fingerprint"),
        (dict(block_size=0), "block_size"),
        (dict(max_context=0), "max_context"),
    ],
)
def test_malformed_status_is_refused(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        status("x", Role.PREFILL, 6000, **overrides)
    with pytest.raises(ValueError, match="engine_id"):
        status("", Role.PREFILL, 6000)
    with pytest.raises(ValueError, match="role"):
        status("x", "prefill", 6000)  # type: ignore[arg-type]


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        EngineRegistry(timeout_s=0)


def test_status_type_is_frozen() -> None:
    with pytest.raises(AttributeError):
        status("x", Role.PREFILL, 6000).running = 1  # type: ignore[misc]
    assert isinstance(status("x", Role.PREFILL, 6000), EngineStatus)
