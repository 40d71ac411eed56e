"""Lifecycle policies: exact offload / upload decisions from predicted waits and reload costs."""

from __future__ import annotations

import pytest

from agentserve.scheduler.kv_lifecycle import (
    KEEP,
    LIFECYCLE_POLICIES,
    AgentServeLifecycle,
    KeepResident,
    OffloadOnly,
    ParkPlan,
    TokenCakeLifecycle,
    TTLPin,
    make_lifecycle_policy,
)

pytestmark = pytest.mark.unit


def test_lru_never_moves_anything():
    assert KeepResident().on_tool_started(600.0, 500.0, 1000) == KEEP


def test_agentserve_offloads_when_the_wait_beats_the_reload():
    policy = AgentServeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5)  # 100 blocks: 1 s to reload
    # Worth it: upload 1.5 reloads before the earliest likely return.
    assert policy.on_tool_started(10.0, 4.0, 100) == ParkPlan(True, 2.5)
    # Break-even is 2 reloads: a 1.9 s wait keeps the KV, a 2 s one parks it.
    assert policy.on_tool_started(1.9, 1.9, 100) == KEEP
    assert policy.on_tool_started(2.0, 2.0, 100) == ParkPlan(True, 0.5)


def test_agentserve_keeps_short_waits_and_empty_sessions():
    policy = AgentServeLifecycle(reload_s_per_block=0.0, min_wait_s=0.5)
    assert policy.on_tool_started(0.4, 0.4, 10) == KEEP
    assert policy.on_tool_started(30.0, 30.0, 0) == KEEP
    assert policy.on_tool_started(0.5, 0.5, 10) == ParkPlan(True, 0.5)


def test_an_upload_never_starts_before_the_call():
    policy = AgentServeLifecycle(reload_s_per_block=0.01)
    assert policy.on_tool_started(10.0, 0.5, 100) == ParkPlan(True, 0.0)


def test_ttl_pin_pins_for_the_predicted_duration():
    assert TTLPin().on_tool_started(7.5, 1.0, 10) == ParkPlan(offload=False, pin_s=7.5)
    assert TTLPin().on_tool_started(7.5, 1.0, 0) == KEEP
    assert TTLPin().on_tool_started(0.0, 0.0, 10) == KEEP


def test_offload_offloads_every_wait_and_never_uploads():
    assert OffloadOnly().on_tool_started(0.01, 0.01, 3) == ParkPlan(offload=True, upload_after_s=None)
    assert OffloadOnly().on_tool_started(600.0, 60.0, 0) == KEEP


def test_tokencake_times_like_agentserve_but_uploads_to_the_engine_it_left():
    tokencake = TokenCakeLifecycle(reload_s_per_block=0.01, min_wait_s=0.5)
    assert tokencake.on_tool_started(10.0, 4.0, 100) == ParkPlan(True, 2.5, upload_to="source")
    assert tokencake.on_tool_started(1.9, 1.9, 100) == KEEP
    assert AgentServeLifecycle(0.01).on_tool_started(10.0, 4.0, 100) == ParkPlan(True, 2.5, upload_to="cluster")


def test_policies_by_name():
    assert LIFECYCLE_POLICIES == ("lru", "ttl-pin", "offload", "tokencake", "agentserve")
    for name in LIFECYCLE_POLICIES:
        assert make_lifecycle_policy(name, 0.001, 0.5).name == name
    with pytest.raises(
        ValueError, match="^kv_lifecycle must be one of lru, ttl-pin, offload, tokencake, agentserve, got 'ttl'$"
    ):
        make_lifecycle_policy("ttl", 0.001, 0.5)
    with pytest.raises(ValueError, match="^breakeven and lead must be"):
        AgentServeLifecycle(0.001, breakeven=0.5)


def test_agentserve_demoting_pins_short_waits_and_parks_long_ones_without_dropping():
    policy = make_lifecycle_policy("agentserve", 0.01, 0.5, offload="demote")
    assert policy.on_tool_started(10.0, 4.0, 100) == ParkPlan(True, 2.5, drop=False)
    assert policy.on_tool_started(1.9, 1.9, 100) == ParkPlan(offload=False, pin_s=1.9)
    assert policy.on_tool_started(0.0, 0.0, 100) == KEEP
    assert policy.on_tool_started(30.0, 30.0, 0) == KEEP
    assert make_lifecycle_policy("agentserve", 0.01, 0.5).on_tool_started(10.0, 4.0, 100) == ParkPlan(True, 2.5)
    with pytest.raises(ValueError, match="^kv_offload must be one of drop, demote, got 'evict'$"):
        make_lifecycle_policy("agentserve", 0.01, 0.5, offload="evict")
