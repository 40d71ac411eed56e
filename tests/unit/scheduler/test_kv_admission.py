"""KV admission: committed demand (turns in flight, sessions gone to tools) against the decode
engines' pools; exact counts, refusals with Retry-After, and a returning session always admitted."""

from __future__ import annotations

import pytest

from agentserve.common.errors import Overloaded
from agentserve.contracts import Role, SamplingParams, ToolCall
from agentserve.scheduler.kv_admission import KV_RETRY_S, KVAdmission
from tests.unit.scheduler.fakes import collect, run, status

pytestmark = pytest.mark.unit


def test_turns_commit_their_blocks_up_to_ratio_times_the_pools() -> None:
    capacity = [40]
    admission = KVAdmission(0.5, lambda: capacity[0])
    assert admission.limit == 20
    a = admission.admit("a", 12)
    b = admission.admit("b", 8)
    with pytest.raises(Overloaded, match=r"^this turn needs 1 KV blocks; 20 of the decode engines' 20 are") as err:
        admission.admit("c", 1)
    assert err.value.retry_after_s == KV_RETRY_S and admission.committed == 20
    with pytest.raises(Overloaded, match=r"fills the decode engines' pools \(20 blocks\)"):
        admission.check_new_session()
    a.release()
    a.release()  # once only
    assert admission.committed == 8
    admission.admit("c", 12).release()
    b.release()
    capacity[0] = 0  # no decode engine known: nothing to measure against (the turn fails on that)
    assert admission.limit is None
    admission.admit("d", 10_000).release()
    assert admission.committed == 0


def test_a_session_gone_to_a_tool_stays_committed_and_its_return_is_admitted() -> None:
    admission = KVAdmission(1.0, lambda: 10)
    admission.admit("parked", 6).release()
    admission.waiting("parked", 6)  # its history, wherever its KV is now
    admission.waiting("parked", 6)  # a second parallel call: counted once
    assert admission.committed == 6
    other = admission.admit("other", 4)
    with pytest.raises(Overloaded):
        admission.admit("new", 1)
    # Its return needs 8 (history, new tokens, max_tokens): admitted over the bound, 2 more committed.
    back = admission.admit("parked", 8)
    assert admission.committed == 12
    back.release()
    other.release()
    assert admission.committed == 0
    admission.waiting("closed", 3)
    admission.forget("closed")
    admission.forget("unknown")
    assert admission.committed == 0


def test_ratio_zero_admits_everything_and_a_bad_ratio_is_refused() -> None:
    admission = KVAdmission(0.0, lambda: 10)
    assert admission.limit is None
    admission.admit("a", 1000)
    admission.check_new_session()
    assert admission.committed == 1000
    with pytest.raises(ValueError, match=r"^kv_commit_ratio must be a finite number >= 0 \(0 = no KV admission\)"):
        KVAdmission(-1.0, lambda: 10)


def test_the_core_refuses_new_sessions_and_turns_past_the_bound_but_not_a_return(make_core) -> None:
    core = make_core(decode=0, kv_commit_ratio=1.0)
    core.register(status("d0", Role.DECODE, 7000, total_kv_blocks=10))
    sampling = SamplingParams(max_tokens=4)  # block size 4; the fake engines reply 4 tokens

    async def go():
        first = await core.open_session()
        await collect(core.turn(first, token_ids=list(range(100, 124)), sampling=sampling))  # 7 blocks
        assert (len(core.sessions.get(first).history), core.kv_admission.committed) == (28, 0)  # idle: nothing
        core.tool_call_started(ToolCall(first, "search", "c1", 0.0, 5.0))
        assert core.kv_admission.committed == 7
        second = await core.open_session()
        with pytest.raises(Overloaded, match="this turn needs 4 KV blocks; 7 of the decode engines' 10"):
            await collect(core.turn(second, token_ids=list(range(10, 22)), sampling=sampling))
        await collect(core.turn(second, token_ids=list(range(10, 18)), sampling=sampling))  # 3 blocks fit
        core.tool_call_started(ToolCall(second, "search", "c2", 0.0, 5.0))
        assert core.kv_admission.committed == 10
        with pytest.raises(Overloaded, match="fills the decode engines' pools"):
            await core.open_session()
        # The first session's return is admitted: its demand was committed when it left.
        core.tool_call_finished(ToolCall(first, "search", "c1", 0.0, 5.0, 5.0, True))
        await collect(core.turn(first, token_ids=[7, 8], sampling=sampling))
        assert core.kv_admission.committed == 3  # the second still waits on its tool
        await core.close_session(second)
        assert core.kv_admission.committed == 0

    run(go())
