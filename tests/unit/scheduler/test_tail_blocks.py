"""Tail blocks in the scheduler: which tail a history has, the lookup of it after the history's
full hits, the prefill and decode requests that load and persist tails, and the old tail's drop."""

from __future__ import annotations

import pytest

from agentserve.contracts import KVPath, LoadPlan, SamplingParams
from agentserve.kv.block_hash import block_ids_for, tail_block_id
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.paths import AlwaysB
from agentserve.scheduler.placement import GlobalScheduler
from agentserve.scheduler.registry import Role
from agentserve.scheduler.router import LeastLoadedRouter
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tail_blocks import Tail, context_tail
from tests.unit.scheduler.fakes import (
    BLOCK_SIZE,
    EOS,
    FINGERPRINT,
    DroppingEngines,
    FakeEngines,
    FakeStore,
    collect,
    run,
    status,
)
from tests.unit.scheduler.test_placement import registry

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=16)


def _ids(tokens: list[int], tenant: str = "") -> list[bytes]:
    return block_ids_for(tokens, BLOCK_SIZE, FINGERPRINT, tenant)


def test_a_history_has_a_tail_of_its_computed_tokens_past_its_last_full_block() -> None:
    prompt = list(range(10, 30))
    ids = _ids(prompt)
    # 11 tokens: the engine computed 10 (the last sampled token has no KV): 2 full blocks and 2 more
    tail = context_tail(prompt, 11, ids, BLOCK_SIZE, FINGERPRINT, "t")
    assert tail == Tail(tail_block_id(ids[1], FINGERPRINT, "t", prompt[8:10], BLOCK_SIZE), 2, 2)
    assert context_tail(prompt, 3, ids, BLOCK_SIZE, FINGERPRINT, "t") == Tail(
        tail_block_id(None, FINGERPRINT, "t", prompt[:2], BLOCK_SIZE), 0, 2
    )
    # A history ending on a block boundary is all full blocks (its last token completed one, and the
    # engine computed it); one token past a boundary leaves nothing computed after it.
    for length in (0, 8, 9):
        assert context_tail(prompt, length, ids, BLOCK_SIZE, FINGERPRINT, "t") is None
    # no prompt token after the tail: nothing to compute on it
    assert context_tail(prompt[:10], 11, ids, BLOCK_SIZE, FINGERPRINT, "t") is None


def test_placement_reads_the_tail_as_one_more_block_and_computes_only_after_it() -> None:
    placer = GlobalScheduler(registry(), LeastLoadedRouter(), path_policy=AlwaysB())
    placed = placer.place(Session("s"), prompt_tokens=10 * BLOCK_SIZE + 3, hit_blocks=8, tail_tokens=2)
    assert (placed.hit_blocks, placed.relay_blocks) == (9, 9)
    assert placed.new_tokens == 2 * BLOCK_SIZE + 3 - 2
    assert placed.persist_blocks == 2  # blocks 8 and 9, full blocks of the prompt under their full ids
    assert placed.plan.path is KVPath.B


class TailStore(FakeStore):
    """The store as a set of block ids: a lookup counts the leading ones it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: set[bytes] = set()
        self.deleted: list[list[bytes]] = []

    async def lookup(self, block_ids: list[bytes]) -> int:
        self.lookups.append(list(block_ids))
        count = 0
        while count < len(block_ids) and block_ids[count] in self.blocks:
            count += 1
        return count

    async def delete(self, block_ids: list[bytes]) -> int:
        self.deleted.append(list(block_ids))
        gone = self.blocks & set(block_ids)
        self.blocks -= gone
        return len(gone)


def _core(tokenizer, store, engines, **config) -> SchedulerCore:
    core = SchedulerCore(SchedulerConfig(http_port=0, **config), tokenizer, store=store, engines=engines)
    core.register(status("p0", Role.PREFILL, 6000))
    core.register(status("d0", Role.DECODE, 7000))
    return core


def _first_prompt_len(tokenizer) -> int:
    engines = FakeEngines()
    core = _core(tokenizer, FakeStore(), engines)

    async def go():
        sid = await core.open_session(tenant="acme")
        await collect(core.turn(sid, message="one", sampling=GREEDY))

    run(go())
    return len(engines.prefills[0][1].token_ids)


def _two_turns(tokenizer, store: TailStore, engines: FakeEngines, stored_tail: bool = True, **config):
    """Turn one's reply is sized for a history of 4k + 3 tokens: 4k + 2 computed, a tail of 2. The
    store then holds the history's full blocks and (`stored_tail`) its tail, as turn one's engines
    would have persisted them; returns the history and its tail."""
    prompt_len = _first_prompt_len(tokenizer)
    engines.reply = [300 + i for i in range((3 - prompt_len) % BLOCK_SIZE + BLOCK_SIZE - 1)] + [EOS]
    core = _core(tokenizer, store, engines, **config)

    async def go():
        sid = await core.open_session(tenant="acme")
        await collect(core.turn(sid, message="one", sampling=GREEDY))
        history = list(core.sessions.get(sid).history)
        full = (len(history) - 1) // BLOCK_SIZE
        ids = _ids(history, "acme")
        tail = tail_block_id(ids[full - 1], FINGERPRINT, "acme", history[full * BLOCK_SIZE : -1], BLOCK_SIZE)
        store.blocks |= set(ids[:full]) | ({tail} if stored_tail else set())
        engines.reply = [400, EOS]
        await collect(core.turn(sid, message="two", sampling=GREEDY))
        return history, Tail(tail, full, 2)

    history, tail = run(go())
    assert len(history) % BLOCK_SIZE == 3
    return core, history, tail


def test_a_later_turn_loads_the_historys_tail_and_deletes_it_when_done(tokenizer) -> None:
    store, engines = TailStore(), FakeEngines()
    core, history, tail = _two_turns(tokenizer, store, engines, kv_path_policy="always-b")
    request = engines.prefills[1][1]
    assert (request.store_hit_blocks, request.store_tail_tokens) == (tail.full_blocks, 2)
    assert request.token_ids[: len(history)] == history
    assert request.plan == LoadPlan(KVPath.B, "127.0.0.1:7000")  # the tail rides path B with the hits
    # one lookup of the prompt's full blocks, one of the tail
    assert store.lookups[-1] == [tail.block_id]
    assert [g[1].persist_tail for g in engines.generates] == [True, True]
    assert store.deleted == [[tail.block_id]]  # garbage once the turn completed
    assert tail.block_id not in store.blocks


def test_no_tail_is_loaded_when_the_store_lacks_it_or_the_hits_stop_short(tokenizer) -> None:
    store, engines = TailStore(), FakeEngines()
    _, _, tail = _two_turns(tokenizer, store, engines, stored_tail=False)
    assert engines.prefills[1][1].store_tail_tokens == 0
    assert store.deleted == [[tail.block_id]]

    store, engines = TailStore(), FakeEngines()
    store.blocks.add(b"\0" * 16)  # nothing of this session: no hits at all, so no tail lookup
    core = _core(tokenizer, store, engines)

    async def go():
        sid = await core.open_session(tenant="acme")
        await collect(core.turn(sid, message="one", sampling=GREEDY))
        await collect(core.turn(sid, message="two", sampling=GREEDY))

    run(go())
    assert all(len(ids) > 1 for ids in store.lookups)
    assert engines.prefills[1][1].store_tail_tokens == 0


def test_tail_blocks_off_looks_up_persists_and_deletes_no_tail(tokenizer) -> None:
    store, engines = TailStore(), FakeEngines()
    _two_turns(tokenizer, store, engines, tail_blocks=False)
    assert engines.prefills[1][1].store_tail_tokens == 0
    assert [g[1].persist_tail for g in engines.generates] == [False, False]
    assert len(store.lookups) == 2 and store.deleted == []


def test_session_kv_store_drops_both_tails_from_the_decode_engine(tokenizer) -> None:
    store, engines = TailStore(), DroppingEngines()
    core, history, tail = _two_turns(tokenizer, store, engines, session_kv="store")
    second = next(iter(core.sessions)).history
    ids = _ids(second, "acme")
    new_tail = context_tail(second, len(second), ids, BLOCK_SIZE, FINGERPRINT, "acme")
    address, dropped = engines.drops[-1]
    expected = ids + [tail.block_id] + ([new_tail.block_id] if new_tail is not None else [])
    assert (address, dropped) == ("127.0.0.1:7000", expected)


def test_tail_blocks_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="tail_blocks must be true or false, got 'yes'"):
        SchedulerConfig(tail_blocks="yes")  # type: ignore[arg-type]
