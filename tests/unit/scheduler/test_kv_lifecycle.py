"""Lifecycle policies: exact offload / upload decisions from predicted waits and reload costs."""

from __future__ import annotations

import pytest

from agentserve.scheduler.kv_lifecycle import KEEP, AgentServeLifecycle, KeepResident, ParkPlan, make_lifecycle_policy

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


def test_policies_by_name():
    assert make_lifecycle_policy("lru", 0.001, 0.5).name == "lru"
    assert make_lifecycle_policy("agentserve", 0.001, 0.5).name == "agentserve"
    with pytest.raises(ValueError, match="^kv_lifecycle must be one of lru, agentserve, got 'ttl'$"):
        make_lifecycle_policy("ttl", 0.001, 0.5)
    with pytest.raises(ValueError, match="^breakeven and lead must be"):
        AgentServeLifecycle(0.001, breakeven=0.5)
