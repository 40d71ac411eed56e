"""GlobalScheduler: one turn's prefill engine, decode engine, relay and load plan, with reasons."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from agentserve.common.errors import RetryableError
from agentserve.contracts import KVPath, LoadPlan, NICStatus, Role
from agentserve.scheduler.paths import AlwaysA, AlwaysB, DualPathPolicy, SplitPolicy
from agentserve.scheduler.placement import GlobalScheduler
from agentserve.scheduler.prefill_policy import DualPathPrefill
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.relay_policy import DualPathRelay, OtherDecodeRelay
from agentserve.scheduler.router import LeastLoadedRouter
from agentserve.scheduler.sessions import Session
from tests.unit.scheduler.fakes import BLOCK_SIZE, status

pytestmark = pytest.mark.unit

BLOCK_BYTES = 1000


def registry(
    prefill_tokens: tuple[int, ...] = (0, 0),
    decode_snic: tuple[int, ...] = (0, 0),
    clock: Callable[[], float] = lambda: 100.0,
    decode_cnic_gbps: float = 0.008,
) -> EngineRegistry:
    """p0.. with these unfinished prefill tokens, d0.. with these storage queues (1 MB/s NICs); by
    default on a clock that stands still (so routed reads stay queued)."""
    reg = EngineRegistry(5.0, clock=clock)
    for i, tokens in enumerate(prefill_tokens):
        nics = (NICStatus("snic", 0.008), NICStatus("cnic", 0.008))
        reg.register(
            status(
                f"p{i}", Role.PREFILL, 6000 + i, nics=nics, kv_block_bytes=BLOCK_BYTES, unfinished_prefill_tokens=tokens
            )
        )
    for i, queue in enumerate(decode_snic):
        nics = (NICStatus("snic", 0.008, queue), NICStatus("cnic", decode_cnic_gbps))
        reg.register(status(f"d{i}", Role.DECODE, 7000 + i, nics=nics, kv_block_bytes=BLOCK_BYTES))
    return reg


def test_dualpath_placement_answers_the_three_questions_and_says_why() -> None:
    reg = registry(prefill_tokens=(900, 100), decode_snic=(0, 3000))
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(alpha_ms=50), DualPathRelay(), SplitPolicy())
    session = Session("s", kv_holder="d0")
    placed = placer.place(session, prompt_tokens=10 * BLOCK_SIZE + 3, hit_blocks=8)
    # p1 has fewer unfinished tokens; d0 holds the session's KV so it decodes and, with the shorter
    # store read (8 ms vs d1's 11 ms), relays too; the split is even.
    assert (placed.prefill.engine_id, placed.decode.engine_id) == ("p1", "d0")
    assert placed.relay is not None and placed.relay.engine_id == "d0"
    assert placed.plan == LoadPlan(KVPath.SPLIT, "127.0.0.1:7000", relay_blocks=4)
    assert (placed.new_tokens, placed.split_fraction) == (2 * BLOCK_SIZE + 3, 0.5)
    assert placed.attributes() == {
        "turn.placement.prefill_engine": "p1",
        "turn.placement.prefill_reason": "short-read-queue",
        "turn.placement.prefill_unfinished_tokens": 100,
        "turn.placement.prefill_snic_queue_bytes": 0,
        "turn.placement.decode_engine": "d0",
        "turn.placement.kv_path": "SPLIT",
        "turn.placement.relay_engine": "d0",
        "turn.placement.relay_reason": "turn-decode",
        "turn.placement.relay_snic_queue_bytes": 0,
        "turn.placement.relay_blocks": 4,
        "turn.placement.split_fraction": 0.5,
    }


def test_reserve_counts_the_turns_work_until_the_prefill_returns() -> None:
    reg = registry()
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), OtherDecodeRelay(), SplitPolicy())
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.plan == LoadPlan(KVPath.SPLIT, "127.0.0.1:7001", relay_blocks=5)
    p0, d1 = reg.get("p0"), reg.get("d1")
    assert p0 is not None and d1 is not None
    with placed.reserve(reg, BLOCK_BYTES):
        assert (p0.unfinished_prefill_tokens, p0.snic_queue_bytes) == (2 * BLOCK_SIZE, 5000)
        assert (d1.snic_queue_bytes, d1.cnic_queue_bytes) == (5000, 5000)
        # The next turn sees p0 busy and goes to p1 before any heartbeat says so.
        assert placer.place(Session("t"), prompt_tokens=4 * BLOCK_SIZE, hit_blocks=0).prefill.engine_id == "p1"
    assert (p0.unfinished_prefill_tokens, p0.snic_queue_bytes, d1.snic_queue_bytes, d1.cnic_queue_bytes) == (0, 0, 0, 0)


def test_dualpath_at_low_load_spreads_storage_nic_traffic_evenly_over_every_engine() -> None:
    # One turn at a time, each returning once its 10 ms read is done, so every queue is empty when
    # the next is placed (low load). Prefill choice, relay and path then take turns by the bytes each
    # storage NIC carried lately. Each turn reads 10 hit blocks (path A on its prefill's NIC, B on a
    # decode's) and its prefill persists the 2 it computes: 720 blocks, 120 on each of the six NICs.
    now = [100.0]
    reg = registry(decode_snic=(0, 0, 0, 0), clock=lambda: now[0])
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), DualPathRelay(), DualPathPolicy())
    readers, blocks = [], Counter[str]()
    for _ in range(60):
        placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
        assert placed.persist_blocks == 2
        reader = (placed.relay or placed.prefill).engine_id
        readers.append(reader)
        blocks[reader] += 10
        blocks[placed.prefill.engine_id] += 2
        with placed.reserve(reg, BLOCK_BYTES):
            now[0] += 0.02
        now[0] += 0.01
    assert readers[:12] == ["p0", "p1", "d0", "d1", "d2", "d3", "d0", "d1", "d2", "d3", "p0", "p1"]
    assert dict(blocks) == {e: 120 for e in ("p0", "p1", "d0", "d1", "d2", "d3")}


def test_without_a_kv_holder_an_equally_loaded_relay_decodes_the_turn_too() -> None:
    reg = registry(decode_snic=(0, 0, 0))
    d0, d1, d2 = (reg.get(f"d{i}") for i in range(3))
    assert d0 is not None and d1 is not None and d2 is not None
    d0.snic.note_write(5000, now=100.0)  # d0 carried the most lately, d2 less, d1 nothing
    d2.snic.note_write(1000, now=100.0)
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), DualPathRelay(), AlwaysB())
    # The router's choice is d0 (all idle, lowest id); d1 relays (least read lately) and, as idle as
    # d0, decodes too, so it keeps what it relays.
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.relay is not None and (placed.relay.engine_id, placed.decode.engine_id) == ("d1", "d1")
    assert placed.relay_reason == "least-read"
    # A busier relay leaves the decode engine to the router.
    d1.inflight = 1
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.relay is not None and (placed.relay.engine_id, placed.decode.engine_id) == ("d1", "d0")
    # So does a session's KV holder, and a relay policy whose point is a relay that does not decode.
    placed = placer.place(Session("s", kv_holder="d2"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.decode.engine_id == "d2"
    other = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), OtherDecodeRelay(), AlwaysB())
    placed = other.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.relay is not None and placed.relay.engine_id != placed.decode.engine_id


def test_path_a_has_no_relay_and_a_first_turn_decode_is_the_routers_choice() -> None:
    reg = registry()
    placed = GlobalScheduler(reg, LeastLoadedRouter(), path_policy=AlwaysA()).place(Session("s"), 40, hit_blocks=5)
    assert (placed.plan, placed.relay, placed.relay_reason, placed.relay_blocks) == (LoadPlan(KVPath.A), None, "", 0)
    assert (placed.prefill.engine_id, placed.prefill_reason, placed.decode.engine_id) == ("p0", "least-loaded", "d0")
    # Path B by the turn's decode engine (the default relay policy).
    placed = GlobalScheduler(reg, LeastLoadedRouter(), path_policy=AlwaysB()).place(Session("s"), 40, hit_blocks=5)
    assert placed.relay is not None and (placed.relay.engine_id, placed.relay_reason) == ("d0", "turn-decode")
    assert (placed.relay_blocks, placed.split_fraction) == (5, 1.0)


def test_no_engine_of_a_role_is_retryable() -> None:
    with pytest.raises(RetryableError, match="no healthy decode engine"):
        GlobalScheduler(registry(decode_snic=()), LeastLoadedRouter()).place(Session("s"), 8, hit_blocks=0)
    with pytest.raises(RetryableError, match="no healthy prefill engine"):
        GlobalScheduler(registry(prefill_tokens=()), LeastLoadedRouter()).place(Session("s"), 8, hit_blocks=0)


def test_a_relay_reads_and_is_charged_every_block_it_relays_whatever_it_holds() -> None:
    # relay_source=store (the default, DualPath's path B): d2 holds the first 8 of the 10 hits
    # (another turn there claims them), yet a relay reads all 10 from the store, so the engines are
    # alike and the turn's decode engine, d0, relays; its storage NIC is charged all 10 blocks.
    reg = registry(decode_snic=(0, 0, 0), decode_cnic_gbps=0.064)
    held = {"d0": 0, "d1": 0, "d2": 8}
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), DualPathRelay(), AlwaysB())
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10, held=lambda d: held[d.engine_id])
    assert placed.relay is not None and (placed.relay.engine_id, placed.relay_reason) == ("d0", "turn-decode")
    assert (placed.relay_held_blocks, placed.relay_store_blocks, placed.plan.relay_hbm_first) == (0, 10, False)
    with placed.reserve(reg, BLOCK_BYTES):
        assert (placed.relay.snic_queue_bytes, placed.relay.cnic_queue_bytes) == (10000, 10000)
    # So is the session's KV holder's.
    placed = placer.place(Session("s", kv_holder="d1"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.relay is not None and (placed.relay.engine_id, placed.relay_store_blocks) == ("d1", 10)


def test_under_hbm_first_a_relay_that_holds_leading_hits_is_charged_only_the_store_reads_it_makes() -> None:
    # 1 MB/s storage NICs, 8 MB/s compute NICs: the store read is the slower leg of a relay.
    reg = registry(decode_snic=(0, 0, 0), decode_cnic_gbps=0.064)
    placer = GlobalScheduler(reg, LeastLoadedRouter(), DualPathPrefill(), DualPathRelay(hbm_first=True), AlwaysB())
    # d2 holds the first 8 of the 10 hits (another turn there claims them): it relays those from
    # HBM and reads 2 from the store (2 ms) where d0 and d1 would read 10 (10 ms).
    held = {"d0": 0, "d1": 0, "d2": 8}
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10, held=lambda d: held[d.engine_id])
    assert placed.relay is not None and (placed.relay.engine_id, placed.relay_reason) == ("d2", "earliest-finish")
    assert placed.plan == LoadPlan(KVPath.B, "127.0.0.1:7002", relay_hbm_first=True)
    assert (placed.relay_held_blocks, placed.relay_store_blocks) == (8, 2)
    with placed.reserve(reg, BLOCK_BYTES):
        assert (placed.relay.snic_queue_bytes, placed.relay.cnic_queue_bytes) == (2000, 10000)
    # The session's KV holder holds every hit: it reads none.
    placed = placer.place(Session("t", kv_holder="d1"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10)
    assert placed.relay is not None and (placed.relay.engine_id, placed.relay_store_blocks) == ("d1", 0)


def test_under_hbm_first_a_split_relays_the_last_hits_so_only_held_ones_among_them_are_not_read() -> None:
    reg = registry()
    placer = GlobalScheduler(
        reg, LeastLoadedRouter(), DualPathPrefill(), OtherDecodeRelay(hbm_first=True), SplitPolicy()
    )
    placed = placer.place(Session("s"), prompt_tokens=12 * BLOCK_SIZE, hit_blocks=10, held=lambda d: 7)
    # Blocks 5..9 are relayed (the last half); the relay holds 0..6, so it reads 7..9 from the store.
    assert placed.plan == LoadPlan(KVPath.SPLIT, "127.0.0.1:7001", relay_blocks=5, relay_hbm_first=True)
    assert (placed.relay_held_blocks, placed.relay_store_blocks) == (7, 3)
