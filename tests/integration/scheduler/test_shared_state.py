"""State shared by schedulers in a real etcd: two scheduler cores (fake engines) over one etcd.

The race: a session's home scheduler runs a turn, stalls past its lease, and the other scheduler
takes the session over and runs a turn of its own from the same history. Whichever order their turns
end in, exactly one is accepted (its final event delivered, its history in etcd) and the other
fails `SessionMoved` having committed nothing."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest

from agentserve.common.errors import Conflict
from agentserve.contracts import GenerateChunk, GenerateRequest, PrefillRequest, PrefillResult, Role, SamplingParams
from agentserve.contracts.context import ContextLayout, Piece
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.kv_ledger import KVLedger
from agentserve.scheduler.shared_sessions import SessionMoved
from tests.support.etcd import etcd_server
from tests.unit.scheduler.fakes import FakeEngines, FakeStore, status

pytestmark = pytest.mark.integration

PARAMS = SamplingParams(max_tokens=3, ignore_eos=True)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with etcd_server(tmp_path_factory.mktemp("etcd")) as address:
        yield address


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(ensure_default_tokenizer())


class GatedEngines(FakeEngines):
    """Fake engines whose decode streams stop before their last token until `gate` opens."""

    def __init__(self) -> None:
        super().__init__(reply=[300, 301, 302, 303])
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    async def generate(self, address: str, request: GenerateRequest, metadata) -> AsyncIterator[GenerateChunk]:
        self.waiting.set()
        await self.gate.wait()
        async for chunk in super().generate(address, request, metadata):
            yield chunk


def scheduler(name: str, etcd: str, prefix: str, tokenizer: Tokenizer, engines: FakeEngines) -> SchedulerCore:
    """A scheduler core with fake engines p0 and d0, its state in `etcd` under `prefix`; engines time
    out (and their etcd leases lapse) after 2 s."""
    config = SchedulerConfig(
        http_port=0,
        heartbeat_interval_ms=1000,
        engine_timeout_ms=2000,
        state="etcd",
        etcd_endpoints=(etcd,),
        etcd_prefix=prefix,
        scheduler_id=name,
        advertise_host="127.0.0.1",
        etcd_lease_s=2,
    )
    core = SchedulerCore(config, tokenizer, store=FakeStore(), engines=engines)
    core.register(status("p0", Role.PREFILL, 6000))
    core.register(status("d0", Role.DECODE, 7000))
    return core


async def _turn(core: SchedulerCore, session_id: str, tokens: list[int]) -> list[int]:
    events = [e async for e in core.turn(session_id, token_ids=tokens, sampling=PARAMS)]
    assert events[-1].finished
    return [t for e in events for t in e.token_ids]


@pytest.mark.parametrize("first", ["old home", "new home", "together"])
def test_two_schedulers_racing_to_append_to_one_session_accept_exactly_one_turn(etcd, tokenizer, first) -> None:
    async def race() -> None:
        prefix = f"/race-{first.replace(' ', '-')}/"
        engines_a, engines_b = GatedEngines(), GatedEngines()
        a, b = scheduler("a", etcd, prefix, tokenizer, engines_a), scheduler("b", etcd, prefix, tokenizer, engines_b)
        await a.start()
        await b.start()
        try:
            session_id = await a.open_session(tenant="t")
            assert (await b.control.sessions.locate(session_id, "")).peer.scheduler_id == "a"
            turn_a = asyncio.create_task(_turn(a, session_id, [11, 12, 13]))
            await engines_a.waiting.wait()
            # a stalls past its lease: its home key lapses, and b takes the session over.
            await a.control.etcd.revoke(a.control.membership.lease)
            assert (await b.control.sessions.locate(session_id, "")).peer is None
            turn_b = asyncio.create_task(_turn(b, session_id, [21, 22]))
            await engines_b.waiting.wait()
            order = {"old home": [engines_a, engines_b], "new home": [engines_b, engines_a], "together": []}[first]
            for engines in order:  # one turn ends (and tries to commit) well before the other
                engines.gate.set()
                await asyncio.sleep(0.3)
            engines_a.gate.set()
            engines_b.gate.set()
            outcomes = await asyncio.gather(turn_a, turn_b, return_exceptions=True)
        finally:
            await a.aclose()
            await b.aclose()
        accepted = [o for o in outcomes if isinstance(o, list)]
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(accepted) == 1 and len(refused) == 1, outcomes
        assert isinstance(outcomes[0], SessionMoved)  # the old home's turn: its lease had lapsed
        c = scheduler("c", etcd, prefix, tokenizer, FakeEngines())
        await c.start()
        try:
            record = await c.control.sessions.read(session_id, "")
        finally:
            await c.aclose()
        assert record is not None
        assert record.turns == 1
        assert record.history[-len(accepted[0]) :] == accepted[0]

    asyncio.run(race())


def test_a_retried_turn_after_its_home_died_is_refused_if_the_home_committed_it(etcd, tokenizer) -> None:
    async def scenario() -> None:
        a = scheduler("a", etcd, "/retry/", tokenizer, FakeEngines())
        b = scheduler("b", etcd, "/retry/", tokenizer, FakeEngines())
        await a.start()
        await b.start()
        try:
            session_id = await a.open_session(tenant="t")
            seen = await b.control.sessions.locate(session_id, "")  # b would forward the turn to a
            await _turn(a, session_id, [11, 12])  # a commits it, then dies before b hears back
            await a.control.etcd.revoke(a.control.membership.lease)
            with pytest.raises(Conflict):
                await b.control.sessions.locate(session_id, "", expect_revision=seen.revision)
            # Without a forwarded request in doubt, b takes the session over at its new revision.
            located = await b.control.sessions.locate(session_id, "")
            assert located.peer is None and located.reloaded
            assert b.sessions.get(session_id).turns == 1
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(scenario())


def test_engines_registered_with_one_scheduler_are_seen_by_all_until_their_lease_lapses(etcd, tokenizer) -> None:
    async def scenario() -> None:
        a = scheduler("a", etcd, "/engines/", tokenizer, FakeEngines())
        b = scheduler("b", etcd, "/engines/", tokenizer, FakeEngines())
        await a.start()
        await b.start()
        try:
            a.register(status("d9", Role.DECODE, 7009, running=3))
            for _ in range(50):
                await asyncio.sleep(0.1)
                await b.control.engines.sync()
                if b.registry.get("d9") is not None:
                    break
            engine = b.registry.get("d9")
            assert engine is not None and engine.status.running == 3  # its load as a heard it
            await asyncio.sleep(b.control.engines.lease_s + 1.5)  # d9 heartbeats no more
            await b.control.engines.sync()
            assert b.registry.get("d9") is None
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(scenario())


def test_a_session_opened_twice_under_one_id_exists_once(etcd, tokenizer) -> None:
    async def scenario() -> None:
        a = scheduler("a", etcd, "/twice/", tokenizer, FakeEngines())
        b = scheduler("b", etcd, "/twice/", tokenizer, FakeEngines())
        await a.start()
        await b.start()
        try:
            await a.open_session(tenant="t", session_id="chat-1")
            with pytest.raises(ValueError, match="already exists"):
                await b.open_session(tenant="t", session_id="chat-1")
            assert "chat-1" not in b.sessions
            await a.close_session("chat-1")
            assert await b.control.sessions.read("chat-1", "") is None
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(scenario())


LAYOUT = ContextLayout(32, (Piece(0, 16, b"m" * 16), Piece(16, 32, b"d" * 16, b"m" * 16)), b"t" * 16)


class ReusingEngines(FakeEngines):
    """Fake engines whose prefill reports the prompt's KV stored as `LAYOUT` (reused shared blocks)."""

    async def prefill(self, address: str, request: PrefillRequest, metadata) -> PrefillResult:
        return dataclasses.replace(await super().prefill(address, request, metadata), context=LAYOUT)


def test_a_session_taken_over_finds_its_kv_where_its_last_turn_left_it(etcd, tokenizer) -> None:
    async def scenario() -> None:
        a = scheduler("a", etcd, "/ledger/", tokenizer, ReusingEngines())
        engines_b = FakeEngines()
        b = scheduler("b", etcd, "/ledger/", tokenizer, engines_b)
        await a.start()
        await b.start()
        try:
            session_id = await a.open_session(tenant="t")
            await _turn(a, session_id, [11, 12, 13])
            keys = a.control.sessions.keys
            record = await a.control.etcd.get(keys.session("", session_id))
            ledger = await a.control.etcd.get(keys.kv_ledger("", session_id))
            assert record is not None and ledger is not None
            assert ledger.mod_revision == record.mod_revision  # written by the turn's commit
            assert KVLedger.decode(ledger.value) == KVLedger("d0", LAYOUT)

            # An idle decode engine whose id sorts first: the router's choice for a session with no holder.
            b.register(status("c9", Role.DECODE, 7009))
            await a.control.etcd.revoke(a.control.membership.lease)  # a dies: b takes the session over
            assert (await b.control.sessions.locate(session_id, "")).peer is None
            taken = b.sessions.get(session_id)
            assert (taken.kv_holder, taken.context) == ("d0", LAYOUT)
            # The next turn decodes on the engine holding the history's KV.
            await _turn(b, session_id, [21, 22])
            assert engines_b.generates[-1][0] == "127.0.0.1:7000"
            after = KVLedger.decode((await b.control.etcd.get(keys.kv_ledger("", session_id))).value)
            assert after == KVLedger("d0", None)  # this turn computed its KV exactly
            await b.close_session(session_id)
            assert await b.control.etcd.get(keys.kv_ledger("", session_id)) is None
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(scenario())
