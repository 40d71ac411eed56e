"""Whole simulated runs on a small cluster: every turn served, bytes accounted, runs repeatable."""

import dataclasses

import pytest

from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.dualpath.workload import AgentWorkloadSpec, generate
from agentserve.sim.config import SimConfig
from agentserve.sim.policies import resolve
from agentserve.sim.run import figures, simulate
from agentserve.sim.workload import poisson_arrivals

SMALL = SimConfig(prefill_nodes=1, decode_nodes=1, gpus_per_node=2)
SPEC = AgentWorkloadSpec(
    agents=8, turns=4, first_context=8192, final_context=12288, output_tokens=8, shared_prefix=7680
)


def test_every_turn_is_served_with_its_store_reads_on_the_paths_the_policy_chose() -> None:
    workload = generate(SPEC)
    for name in ("baseline", "dualpath"):
        result = simulate(SMALL, resolve(name), workload, tool_wait_s=0.5, seed=1)
        run = figures(result)
        assert run["turns_total"] == run["turns_ok"] == 32
        assert all(r.first_token_s is not None and r.done_s is not None for r in result.records)
        assert all(r.sent_s <= r.first_token_s <= r.done_s for r in result.records)  # type: ignore[operator]
        block_bytes = SMALL.block_size * SMALL.kv_bytes_per_token
        loaded = sum(r.loaded_blocks for r in result.records) * block_bytes
        assert result.bytes_by_path["A"] + result.bytes_by_path["B"] == loaded
        assert sum(result.snic_bytes.values()) == loaded
        if name == "baseline":
            assert result.bytes_by_path["B"] == 0  # always-a: every read over the prefill node's NIC
        else:
            assert result.bytes_by_path["B"] > 0  # dualpath: the decode node's NIC carries some


def test_the_same_seed_gives_the_same_run() -> None:
    workload = generate(SPEC)
    arrivals = poisson_arrivals(2.0, 4.0, seed=3)
    one = simulate(SMALL, resolve("dualpath-split"), workload_for(arrivals), arrivals, tool_wait_s=0.5, seed=3)
    two = simulate(SMALL, resolve("dualpath-split"), workload_for(arrivals), arrivals, tool_wait_s=0.5, seed=3)
    assert one.records == two.records
    assert figures(one) == figures(two)
    assert len(workload.sessions) == 8


def workload_for(arrivals: list[float]) -> Workload:
    return generate(dataclasses.replace(SPEC, agents=len(arrivals)))


def test_poisson_arrivals_fall_in_the_window_in_order() -> None:
    times = poisson_arrivals(5.0, 10.0, seed=0)
    assert times == sorted(times) and times[-1] < 10.0
    assert 30 < len(times) < 80  # 50 expected
    assert poisson_arrivals(5.0, 10.0, seed=0) == times
    with pytest.raises(ValueError, match="positive rate"):
        poisson_arrivals(0.0, 10.0, seed=0)
