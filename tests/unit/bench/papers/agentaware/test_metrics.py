"""bench agentaware's figures: job and critical-path latency, returning turns resident at their
first token, recomputed tokens, decode-pool occupancy, parking bytes, the must-show ratios against
lru and the Markdown report."""

from pathlib import Path

import pytest

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.papers.agentaware import ratios
from agentserve.bench.papers.agentaware.metrics import (
    job_latencies,
    occupancy,
    parking_blocks,
    returning_turns,
    run_figures,
    token_figures,
)
from agentserve.bench.papers.agentaware.report import markdown
from agentserve.bench.papers.replay.prom import Scrape
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from tests.support.golden import matches_golden

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden" / "report.md"

BLOCK = 64


def workload() -> Workload:
    tool = (ToolCall("Bash", 2.0),)
    return Workload(
        "w",
        (
            Session(
                "j000-planner", (Turn(8, 100), Turn(8, 50, after=("j000-coder0",))), agent="planner", critical=True
            ),
            Session("j000-coder0", (Turn(8, 100, tools=tool, after=("j000-planner#0",)), Turn(8, 50)), agent="coder"),
            Session("j001-lead", (Turn(8, 100, tools=tool), Turn(8, 50)), agent="lead", critical=True),
        ),
    ).validate()


def test_job_latency_and_critical_path_jct():
    sessions = [
        SessionRecord("j000-planner", 2.0, 10.0),
        SessionRecord("j000-coder0", 1.0, 12.0),
        SessionRecord("j001-lead", 5.0, 8.0),
    ]
    e2e, crit = job_latencies(workload(), sessions)
    assert e2e == {"j000": 11.0, "j001": 3.0}
    assert crit == {"j000": 8.0, "j001": 3.0}  # the planner's own span, not the coder's


def test_unfinished_jobs_are_left_out():
    sessions = [SessionRecord("j000-planner", 1.0, 9.0), SessionRecord("j000-coder0", 1.0, None)]
    assert job_latencies(workload(), sessions) == ({}, {})


def turn(
    session: str,
    index: int,
    expected: int,
    held: int,
    cached: int = 0,
    prompt: int = 0,
    error: str = "",
    decode: str = "decode-0",
):
    return TurnRecord(
        session,
        index,
        index == 0,
        0.0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        expected_cached_tokens=expected,
        handoff_held_blocks=held,
        decode_engine=decode,
        error=error,
    )


def test_returning_turns_count_resident_kv_only_after_a_tool():
    turns = [
        turn("j000-coder0", 1, expected=4 * BLOCK, held=4, decode="decode-1"),  # after a tool, all held: resident
        turn("j001-lead", 1, expected=4 * BLOCK, held=3),  # after a tool, one block missing
        turn("j000-planner", 1, expected=4 * BLOCK, held=0),  # no tool before it: not returning
        turn("j000-coder0", 0, expected=0, held=0),  # decoded on decode-0: its next turn moved
        turn("j001-lead", 0, expected=0, held=0),
    ]
    assert returning_turns(workload(), turns, BLOCK) == {
        "returning_turns": 2,
        "resident_at_first_token": 1,
        "prefetch_hit_ratio": 0.5,
        "returning_turns_on_another_engine": 1,
        "resident_on_another_engine": 1,
    }


def test_recomputed_tokens_are_reusable_tokens_not_served_from_cache():
    turns = [
        turn("j000-coder0", 1, expected=256, held=0, cached=192, prompt=300),
        turn("j001-lead", 1, expected=256, held=0, cached=256, prompt=300),
        turn("j001-lead", 0, expected=0, held=0, cached=0, prompt=100, error="boom"),  # failed: not counted
    ]
    assert token_figures(turns) == {
        "prompt_tokens": 600,
        "computed_prompt_tokens": 152,
        "recomputed_tokens": 64,
        "store_loaded_blocks": 0,
    }


def slots(
    t: float, decode: dict[str, tuple[int, int, int]], dropped: int = 0, uploaded: int = 0, held: int = 0
) -> Scrape:
    """decode engine -> (used, cached, free) slots; `held` slots (pinned, idle) on every engine."""
    by_target = {
        name: {
            ("agentserve_engine_kv_slots", (("state", "used"),)): float(u),
            ("agentserve_engine_kv_slots", (("state", "held"),)): float(held),
            ("agentserve_engine_kv_slots", (("state", "cached"),)): float(c),
            ("agentserve_engine_kv_slots", (("state", "free"),)): float(f),
        }
        for name, (u, c, f) in decode.items()
    }
    by_target["scheduler"] = {
        ("agentserve_scheduler_kv_parking_blocks_total", (("direction", "dropped"),)): float(dropped),
        ("agentserve_scheduler_kv_parking_blocks_total", (("direction", "uploaded"),)): float(uploaded),
    }
    by_target["prefill"] = {("agentserve_engine_kv_slots", (("state", "used"),)): 100.0}  # not a decode pool
    return Scrape(t, by_target)


def test_occupancy_is_a_time_mean_over_decode_pools():
    scrapes = [
        slots(100.0, {"decode-0": (10, 30, 60), "decode-1": (0, 0, 100)}),
        slots(101.0, {"decode-0": (50, 50, 0), "decode-1": (50, 0, 50)}),
        slots(103.0, {"decode-0": (0, 0, 100), "decode-1": (0, 0, 100)}),
    ]
    kv = occupancy(scrapes, 100.0)
    assert kv["t_s"] == [0.0, 1.0, 3.0]
    assert kv["used_share"] == [0.05, 0.5, 0.0]
    assert kv["occupied_share"] == [0.2, 0.75, 0.0]
    assert kv["kv_utilization"] == pytest.approx((0.05 * 1 + 0.5 * 2) / 3)
    assert kv["kv_occupancy"] == pytest.approx((0.2 * 1 + 0.75 * 2) / 3)
    assert kv["held_share"] == [0.0, 0.0, 0.0]


def test_pinned_slots_are_resident_but_not_in_use():
    scrapes = [
        slots(0.0, {"decode-0": (10, 10, 70), "decode-1": (0, 20, 70)}, held=10),
        slots(2.0, {"decode-0": (10, 10, 70), "decode-1": (0, 20, 70)}, held=10),
    ]
    kv = occupancy(scrapes, 0.0)
    assert kv["used_share"] == [0.05, 0.05]
    assert kv["held_share"] == [0.1, 0.1]
    assert kv["occupied_share"] == [0.3, 0.3]
    assert (kv["kv_utilization"], kv["kv_held"], kv["kv_occupancy"]) == (0.05, 0.1, 0.3)


def test_parking_blocks_are_counter_deltas():
    first = slots(0.0, {}, dropped=5, uploaded=2)
    last = slots(9.0, {}, dropped=25, uploaded=12)
    assert parking_blocks(first, last) == {"dropped": 20, "uploaded": 10}


def test_run_figures_put_bytes_on_blocks():
    scrapes = [slots(0.0, {"decode-0": (0, 0, 10)}, 0, 0), slots(2.0, {"decode-0": (5, 5, 0)}, 4, 3)]
    sessions = [SessionRecord("j001-lead", 0.0, 4.0)]
    turns = [turn("j001-lead", 1, expected=128, held=2, cached=128, prompt=200)]
    f = run_figures(workload(), turns, sessions, scrapes, 0.0, 4.0, BLOCK, 1000, NoCompute())
    assert (f["offload_bytes"], f["upload_bytes"]) == (4000, 3000)
    assert f["job_latency_mean_s"] == 4.0 and f["jobs_done"] == 1
    assert f["prefetch_hit_ratio"] == 1.0
    assert f["kv"]["kv_utilization"] == 0.0  # the step function holds the first sample until the second
    assert f["bound"]["job_latency_bounds_s"] == []  # j001's first turn has no record: no bound


class NoCompute:
    def of(self, record: TurnRecord) -> float:
        return 0.0


def run(
    latency: float, critical: float, util: float, hits: float | None, offload: int = 0, bound: float | None = None
) -> dict:
    return {
        "bound": {
            "job_latency_bound_mean_s": bound,
            "chain_tool_share": 0.75 if bound else None,
            "chain_llm_share": 0.25 if bound else None,
            "chain_modelled_compute_share": 0.05 if bound else None,
        },
        "job_latency_mean_s": latency,
        "critical_path_jct_mean_s": critical,
        "kv": {"kv_utilization": util},
        "prefetch_hit_ratio": hits,
        "recomputed_tokens": 10,
        "offload_bytes": offload,
        "upload_bytes": offload // 2,
    }


def test_must_show_compares_with_lru_at_the_middle_rate():
    by_policy = {
        "lru": {
            0.2: run(1.0, 1.0, 0.1, 0.5),
            0.4: run(20.0, 10.0, 0.2, 0.4, bound=15.0),
            0.8: run(90.0, 9.0, 0.3, 0.3),
        },
        "agentserve": {0.2: run(1.0, 1.0, 0.1, 1.0), 0.4: run(10.0, 8.0, 0.25, 0.95, 400), 0.8: run(1.0, 1.0, 1, 1)},
    }
    figures = ratios.must_show(by_policy)
    assert figures["compared_at_rate_jobs_per_s"] == 0.4
    assert figures["e2e_latency_reduction"] == 0.5
    assert figures["critical_path_jct_reduction"] == pytest.approx(0.2)
    assert figures["kv_utilization_gain"] == pytest.approx(0.25)
    assert figures["prefetch_hit_ratio"] == 0.95
    assert figures["offload_bytes"] == {"lru": 0, "agentserve": 400}
    assert figures["upload_bytes"] == {"lru": 0, "agentserve": 200}
    assert figures["by_policy"]["lru"]["e2e_latency_reduction"] == 0.0
    assert figures["e2e_latency_reduction_bound"] == 0.25  # 1 - 15 / 20: lru's own bound and latency
    assert figures["e2e_latency_reduction_of_reachable"] == 2.0  # 0.5 of a reachable 0.25 (figures made up)
    assert figures["by_policy"]["lru"]["job_latency_bound_mean_s"] == 15.0
    assert (figures["lru_chain_tool_share"], figures["lru_chain_llm_share"]) == (0.75, 0.25)
    assert figures["lru_chain_modelled_compute_share"] == 0.05
    verdicts = ratios.verdicts(figures)
    assert {k: v["met"] for k, v in verdicts.items()} == {
        "e2e_latency_reduction": True,
        "kv_utilization_gain": True,
        "prefetch_hit_ratio": True,
    }


def test_must_show_without_the_baseline_says_so():
    assert ratios.must_show({"agentserve": {0.4: run(1.0, 1.0, 0.1, 1.0)}}) == {
        "reason": "the lru baseline did not run"
    }


def test_markdown_reports_targets_every_run_and_the_regime():
    figures = run(10.0, 8.0, 0.25, 0.95, 4_000_000, bound=9.5)
    figures.update(
        jobs_done=16,
        turns_failed=0,
        turn_retries=3,
        job_latency_p90_s=12.0,
        resident_at_first_token=19,
        returning_turns=20,
        returning_turns_on_another_engine=4,
        resident_on_another_engine=3,
        computed_prompt_tokens=500,
        store_loaded_bytes=2_000_000,
    )
    figures["kv"]["kv_occupancy"] = 0.6
    figures["kv"]["kv_held"] = 0.1
    result = {
        **ratios.must_show({"lru": {0.4: run(20.0, 10.0, 0.2, 0.4, bound=15.0)}, "agentserve": {0.4: figures}}),
        "policies": {
            "agentserve": {"runs": {"0.4": figures}},
            "ttl-pin": {"unavailable": ["scheduler: kv_lifecycle must be one of lru, agentserve"], "runs": {}},
        },
        "regime": {
            "workload_shape": {
                "jobs": 16,
                "jobs_by_shape": {"code-writer": 8, "deep-research": 8},
                "agents": 72,
                "critical_agents": 40,
                "turns": 192,
                "tool_calls": 104,
            },
            "tool_sample": {"source": "tracelab:x", "calls": 19, "median_s": 0.176, "mean_s": 4.2, "max_s": 21.5},
            "workload": {"prediction": "median"},
            "kv_budget": {"decode_pool_tokens_total": 32768},
            "rates_jobs_per_s": [0.2, 0.4, 0.8],
            "time_dilation": 0.5,
            "cluster": {"prefill_engines": 1, "decode_engines": 2, "profile": "p", "kv_block_tokens": 64},
        },
        "machine": {"cpus": 2},
        "wall_s": 600.0,
    }
    result["targets"] = ratios.verdicts(result)
    assert {k: (v["value"], v["met"]) for k, v in result["targets"].items()} == {
        "e2e_latency_reduction": (0.5, True),
        "kv_utilization_gain": (0.25, True),
        "prefetch_hit_ratio": (0.95, True),
    }
    assert (result["critical_path_jct_reduction"], result["e2e_latency_reduction_bound"]) == (pytest.approx(0.2), 0.25)
    assert result["e2e_latency_reduction_of_reachable"] == 2.0
    assert matches_golden(markdown(result), GOLDEN)
