"""RoundGroups: a round's compatible turns released together, and pinned to the round's engine."""

from __future__ import annotations

import asyncio

import pytest

from agentserve.contracts.segments import ReusePolicy
from agentserve.scheduler.rounds import RoundGroups, RoundKey

pytestmark = pytest.mark.unit

KEY = RoundKey("acme", 2, ReusePolicy())


def test_turns_of_one_round_within_the_window_form_one_group_released_at_once() -> None:
    async def go():
        groups = RoundGroups(window_s=0.05)
        released: list[tuple[str, int]] = []

        async def member(name: str, delay: float):
            await asyncio.sleep(delay)
            group = await groups.join(KEY)
            released.append((name, group.members))  # how many had joined when this one left
            return group

        first, second, third = await asyncio.gather(member("a", 0), member("b", 0.01), member("c", 0.02))
        late = await member("d", 0)  # the group closed: a new one
        return first, second, third, late, released

    first, second, third, late, released = asyncio.run(go())
    assert first is second is third and first.members == 3
    assert late is not first and late.members == 1
    # None of a, b, c left before the last of them joined.
    assert released == [("a", 3), ("b", 3), ("c", 3), ("d", 1)]


def test_incompatible_turns_form_separate_groups() -> None:
    async def go():
        groups = RoundGroups(window_s=0.01)
        keys = [
            KEY,
            RoundKey("other-tenant", 2, ReusePolicy()),
            RoundKey("acme", 3, ReusePolicy()),
            RoundKey("acme", 2, ReusePolicy(recompute_fraction=0.5)),
            KEY,
        ]
        return await asyncio.gather(*(groups.join(k) for k in keys))

    a, b, c, d, e = asyncio.run(go())
    assert a is e and a.members == 2
    assert len({id(g) for g in (a, b, c, d)}) == 4


def test_a_zero_window_releases_a_lone_turn_at_once() -> None:
    async def go():
        return await asyncio.wait_for(RoundGroups(window_s=0).join(KEY), timeout=1)

    assert asyncio.run(go()).members == 1


def test_the_round_engine_is_pinned_per_tenant_and_round_across_policies_and_forgotten_lru() -> None:
    groups = RoundGroups(max_rounds=2)
    assert groups.engine_for(KEY) is None
    groups.placed(KEY, "p1")
    assert groups.engine_for(RoundKey("acme", 2, ReusePolicy(recompute_fraction=0.3))) == "p1"
    groups.placed(RoundKey("acme", 3, ReusePolicy()), "p0")
    assert groups.engine_for(KEY) == "p1"  # used: now the most recent
    groups.placed(RoundKey("acme", 4, ReusePolicy()), "p0")  # evicts round 3, the least recent
    assert groups.engine_for(RoundKey("acme", 3, ReusePolicy())) is None
    assert groups.engine_for(KEY) == "p1"


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(ValueError, match="round window must be a finite number of seconds >= 0, got -1"):
        RoundGroups(window_s=-1)
