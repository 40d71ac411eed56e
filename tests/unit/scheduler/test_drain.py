"""Scale-in: a drained engine takes no new turns, finishes the ones it has, and leaves the registry
only once nothing the scheduler sent is still on it."""

from __future__ import annotations

import pytest

from agentserve.common.errors import FailedPrecondition, NotFoundError
from agentserve.contracts import SamplingParams
from agentserve.scheduler.registry import EngineRegistry, Role
from tests.unit.scheduler.fakes import collect, run, status

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=16)


def ids(engines) -> list[str]:
    return [e.engine_id for e in engines]


@pytest.fixture
def registry() -> EngineRegistry:
    registry = EngineRegistry(timeout_s=5.0)
    for i in range(2):
        registry.register(status(f"d{i}", Role.DECODE, 7000 + i))
    registry.register(status("p0", Role.PREFILL, 6000))
    return registry


def test_a_draining_engine_takes_no_new_work_but_still_counts_as_alive_for_its_own(registry) -> None:
    assert registry.drain("d0").engine_id == "d0"
    assert ids(registry.alive(Role.DECODE)) == ["d1"]
    assert ids(registry.alive(Role.DECODE, draining=True)) == ["d0", "d1"]
    assert registry.drain("127.0.0.1:7000").engine_id == "d0"  # by address too; idempotent


def test_draining_is_sticky_across_heartbeats_and_a_fresh_registration_clears_it(registry) -> None:
    registry.drain("d0")
    assert registry.heartbeat(status("d0", Role.DECODE, 7000, running=1))  # sent before it heard
    assert registry.get("d0").draining and registry.get("d0").status.running == 1
    registry.register(status("d0", Role.DECODE, 7000))  # a new process under the same id
    assert not registry.get("d0").draining


def test_deregister_waits_for_calls_placements_and_turns_on_the_engine(registry) -> None:
    engine = registry.get("d0")
    registry.drain("d0")
    for holding in (registry.track(engine), registry.plan(engine, snic_bytes=10), registry.hold(engine)):
        with holding:
            assert not registry.deregister(engine.status)
            assert registry.get("d0") is engine
    assert engine.busy == 0 and engine.inflight == 0
    assert registry.deregister(engine.status)
    assert registry.get("d0") is None
    assert registry.deregister(engine.status)  # gone already: nothing to wait for


def test_an_engine_deregistering_on_its_own_is_marked_draining_first(registry) -> None:
    engine = registry.get("d1")
    with registry.hold(engine):
        assert not registry.deregister(status("d1", Role.DECODE, 7001))
        assert ids(registry.alive(Role.DECODE)) == ["d0"]


def test_bad_names_and_the_last_engine_of_a_role_are_refused_by_name(registry) -> None:
    with pytest.raises(ValueError, match="DrainEngineRequest.engine must name an engine"):
        registry.drain("")
    with pytest.raises(
        NotFoundError, match=r"DrainEngineRequest.engine: no registered engine 'd9' \(registered: d0, d1, p0\)"
    ):
        registry.drain("d9")
    with pytest.raises(FailedPrecondition, match="p0 is the last prefill engine"):
        registry.drain("p0")
    registry.drain("d0")
    with pytest.raises(FailedPrecondition, match="d1 is the last decode engine"):
        registry.drain("d1")


def test_a_turn_on_a_draining_engine_finishes_there_and_the_next_goes_elsewhere(make_core, engines) -> None:
    core = make_core()

    async def go():
        sid = await core.open_session()
        await collect(core.turn(sid, token_ids=[10, 11], sampling=GREEDY))
        holder = core.sessions.get(sid).kv_holder
        events = core.turn(sid, token_ids=[12], sampling=GREEDY)
        first = await anext(events)  # the turn is on its decode engine now
        engine = core.drain_engine(holder)
        refused = core.deregister(engine.status)  # the turn still holds it
        rest = [event async for event in events]
        third = await collect(core.turn(sid, token_ids=[13], sampling=GREEDY))
        return holder, first, rest, refused, core.deregister(engine.status), third

    holder, first, rest, refused, left, third = run(go())
    assert first.metadata.decode_engine == holder and rest[-1].finished
    assert (refused, left) == (False, True)
    assert core.registry.get(holder) is None
    assert third[0].metadata.decode_engine != holder


def test_the_heartbeat_reply_tells_a_drained_engine_and_peers_keep_it_until_it_leaves(make_core) -> None:
    core = make_core()
    core.drain_engine("d0")
    assert core.drain_requested("d0") and not core.drain_requested("d1")
    assert core.peers() == ["127.0.0.1:7000", "127.0.0.1:7001"]  # a turn placed before still hands off
    assert core.deregister(status("d0", Role.DECODE, 7000))
    assert core.peers() == ["127.0.0.1:7001"] and not core.drain_requested("d0")
