"""TurnKV alone: a turn's store hits and stored tail, its claims on its decode engine, and their
release, against a fake store and fake drops."""

from __future__ import annotations

import pytest
from opentelemetry import trace

from agentserve.contracts import Role, SamplingParams
from agentserve.kv.block_hash import block_ids_for
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.running_turn import RunningTurn
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tail_blocks import context_tail
from agentserve.scheduler.turn_kv import TurnKV
from agentserve.scheduler.turn_ports import KVPorts
from tests.unit.scheduler.fakes import BLOCK_SIZE, FINGERPRINT, FakeStore, run, status

pytestmark = pytest.mark.unit

D0, D1 = "127.0.0.1:7000", "127.0.0.1:7001"


class TailStore(FakeStore):
    """Holds `hits` leading blocks and the ids in `tails`; records deletes."""

    def __init__(self, hits: int, tails: set[bytes] = frozenset()) -> None:
        super().__init__(hits)
        self.tails = set(tails)
        self.deleted: list[list[bytes]] = []

    async def lookup(self, block_ids: list[bytes]) -> int:
        if len(block_ids) == 1 and block_ids[0] in self.tails:
            self.lookups.append(list(block_ids))
            return 1
        return await super().lookup(block_ids)

    async def delete(self, block_ids: list[bytes]) -> int:
        self.deleted.append(list(block_ids))
        return len(block_ids)


class Drops:
    def __init__(self) -> None:
        self.drops: list[tuple[str, list[bytes]]] = []

    async def drop_kv(self, address: str, block_ids: list[bytes]) -> int:
        self.drops.append((address, list(block_ids)))
        return len(block_ids)


def registry() -> EngineRegistry:
    registered = EngineRegistry(10.0)
    registered.register(status("d0", Role.DECODE, 7000))
    return registered


def turn(history: list[int], new: list[int], session_id: str = "s") -> RunningTurn:
    session = Session(session_id, tenant="acme", history=list(history))
    return RunningTurn(session, history + new, SamplingParams(max_tokens=4), 1, 1, trace.INVALID_SPAN)


def ids(tokens: list[int]) -> list[bytes]:
    return block_ids_for(tokens, BLOCK_SIZE, FINGERPRINT, "acme")


def test_store_hits_are_the_stored_leading_blocks_of_the_prompt() -> None:
    store = TailStore(hits=2)
    kv, running = TurnKV(KVPorts(store), registry()), turn(list(range(10)), [50, 51, 52])
    assert run(kv.store_hits(running)) == 2
    assert running.prompt_blocks == ids(list(range(10)) + [50, 51, 52])
    assert store.lookups == [running.prompt_blocks]
    assert (running.context_tail, running.tail_tokens) == (None, 0)  # tail blocks off


def test_no_registered_engine_or_a_failed_lookup_gives_no_hits() -> None:
    store = TailStore(hits=2)
    assert run(TurnKV(KVPorts(store), EngineRegistry(10.0)).store_hits(turn(list(range(10)), [50]))) == 0
    assert store.lookups == []
    assert run(TurnKV(KVPorts(FakeStore(hits=2, fail=True)), registry()).store_hits(turn(list(range(10)), [50]))) == 0


def test_the_history_tail_loads_when_every_full_history_block_is_stored_and_it_is() -> None:
    # Eleven tokens: the previous turn's decode engine computed ten (not the last it sampled), two
    # full blocks and a tail of two tokens.
    history = list(range(11))
    tail = context_tail(history + [50, 51], len(history), ids(history + [50, 51]), BLOCK_SIZE, FINGERPRINT, "acme")
    assert tail is not None and tail.full_blocks == 2 and tail.tokens == 2
    store = TailStore(hits=2, tails={tail.block_id})
    kv, running = TurnKV(KVPorts(store, tail_blocks=True, deletes=store), registry()), turn(history, [50, 51])
    assert run(kv.store_hits(running)) == 2
    assert (running.context_tail, running.tail_tokens) == (tail, 2)
    # A hit short of the history's full blocks: the tail is not loaded (but still deleted after the turn).
    short = turn(history, [50, 51])
    assert (
        run(TurnKV(KVPorts(TailStore(hits=1, tails={tail.block_id}), tail_blocks=True), registry()).store_hits(short))
        == 1
    )
    assert (short.context_tail, short.tail_tokens) == (tail, 0)
    run(kv.release(running))
    assert store.deleted == [[tail.block_id]]


def test_claims_keep_a_turns_blocks_from_another_turns_drop() -> None:
    drops = Drops()
    kv = TurnKV(KVPorts(TailStore(hits=3), drops=drops), registry())
    first, second = turn([], list(range(12)), "one"), turn([], list(range(8)) + [90, 91, 92, 93], "two")
    for running in (first, second):
        run(kv.store_hits(running))
    kv.claim(first, D0)
    assert kv.held(second, 3, registry().alive(Role.DECODE)[0]) == 2  # the two blocks both prompts share
    kv.claim(second, D0)
    first.decode_address = second.decode_address = D0
    first.output = [7, 7, 7, 7]
    run(kv.release(first))
    shared = ids(list(range(8)))
    assert drops.drops == [(D0, [i for i in ids(list(range(12)) + [7, 7, 7, 7]) if i not in shared])]
    assert kv.claims.claimed(D0) == 3  # the second turn's three blocks
    kv.claim(second, D1)  # moved to another decode engine
    assert (kv.claims.claimed(D0), kv.claims.claimed(D1)) == (0, 3)
    kv.unclaim(second)
    assert kv.claims.claimed(D1) == 0 and second.claim is None


def test_without_drops_nothing_is_claimed_or_dropped() -> None:
    kv, running = TurnKV(KVPorts(TailStore(hits=1)), registry()), turn([], list(range(8)))
    run(kv.store_hits(running))
    kv.claim(running, D0)
    running.decode_address = D0
    run(kv.release(running))
    assert (running.claim, kv.claims.claimed(D0)) == (None, 0)
