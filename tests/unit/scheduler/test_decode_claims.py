"""DecodeClaims: what a `session_kv=store` drop may take while other turns need blocks there."""

from __future__ import annotations

import pytest

from agentserve.scheduler.decode_claims import DecodeClaims

pytestmark = pytest.mark.unit

SHARED, A1, B1 = b"s" * 16, b"a" * 16, b"b" * 16


def test_a_drop_leaves_blocks_another_turn_claims_on_that_engine() -> None:
    claims = DecodeClaims()
    claims.claim("d0", [SHARED, A1])
    claims.claim("d0", [SHARED, B1])
    claims.claim("d1", [A1])
    claims.release("d0", [SHARED, A1])  # turn A ends on d0; turn B (same shared prefix) is in flight there
    assert claims.unclaimed("d0", [SHARED, A1]) == [A1]
    assert claims.unclaimed("d2", [SHARED, A1]) == [SHARED, A1]  # nothing claimed there
    claims.release("d0", [SHARED, B1])
    assert claims.unclaimed("d0", [SHARED, A1, B1]) == [SHARED, A1, B1]
    assert (claims.claimed("d0"), claims.claimed("d1")) == (0, 1)


def test_releasing_what_was_never_claimed_changes_nothing() -> None:
    claims = DecodeClaims()
    claims.claim("d0", [SHARED])
    claims.release("d1", [SHARED])
    claims.release("d0", [A1])
    assert claims.unclaimed("d0", [SHARED, A1]) == [A1]
    claims.release("d0", [SHARED])
    claims.release("d0", [SHARED])  # once more: no negative count that a later claim would cancel
    claims.claim("d0", [SHARED])
    assert claims.unclaimed("d0", [SHARED]) == []


def test_held_prefix_is_the_leading_run_claimed_on_that_engine() -> None:
    claims = DecodeClaims()
    claims.claim("d0", [SHARED, A1])
    assert claims.held_prefix("d0", [SHARED, B1, A1]) == 1  # B1 breaks the run
    assert claims.held_prefix("d0", [SHARED, A1, B1]) == 2
    assert claims.held_prefix("d1", [SHARED]) == 0
