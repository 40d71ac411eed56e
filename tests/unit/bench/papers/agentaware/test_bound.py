"""bench agentaware's latency bound: a hand-made code-writer DAG whose critical path is known, the
measured chain's exact split, and a turn's modelled compute from the engines' cost model."""

import pytest

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.papers.agentaware.bound import TurnCost, bound_figures, job_bounds, measured_chains
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.costmodel.gpus import target_gpu
from agentserve.costmodel.models import target_model
from agentserve.costmodel.timing import ComputeCost

pytestmark = pytest.mark.unit


class PromptSeconds:
    """A service model that is easy to add up by hand: one local second per 100 prompt tokens."""

    def of(self, record: TurnRecord) -> float:
        return record.prompt_tokens / 100


def workload() -> Workload:
    tool = (ToolCall("Bash", 1.0),)
    return Workload(
        "w",
        (
            Session("j000-planner", (Turn(8, 100), Turn(8, 100, after=("j000-reviewer",))), agent="planner"),
            Session("j000-coder0", (Turn(8, 100, tools=tool, after=("j000-planner#0",)), Turn(8, 100)), agent="coder"),
            Session("j000-coder1", (Turn(8, 100, tools=tool, after=("j000-planner#0",)), Turn(8, 100)), agent="coder"),
            Session("j000-reviewer", (Turn(8, 100, after=("j000-coder0", "j000-coder1")),), agent="reviewer"),
        ),
    ).validate()


def record(session: str, index: int, prompt: int, done: float, tool: float = 0.0) -> TurnRecord:
    return TurnRecord(session, index, index == 0, sent_s=0.0, prompt_tokens=prompt, done_s=done, tool_s=tool)


def measured() -> tuple[list[TurnRecord], list[SessionRecord]]:
    """planner#0 (1 s of service) -> coder0 (1 s, tool 5 s; then 2 s) and coder1 (1 s, tool 2 s;
    then 1 s) -> reviewer (3 s) -> planner#1 (1 s), as a loaded run measured them."""
    turns = [
        record("j000-planner", 0, 100, done=11.5),
        record("j000-coder0", 0, 100, done=18.0, tool=5.0),
        record("j000-coder0", 1, 200, done=21.0),
        record("j000-coder1", 0, 100, done=15.0, tool=2.0),
        record("j000-coder1", 1, 100, done=16.5),
        record("j000-reviewer", 0, 300, done=25.0),
        record("j000-planner", 1, 100, done=27.0),
    ]
    sessions = [SessionRecord(s, 10.0, 27.0) for s in ("j000-planner", "j000-coder0", "j000-coder1", "j000-reviewer")]
    return turns, sessions


def test_the_bound_is_the_longest_path_of_service_and_measured_tool_time():
    turns, sessions = measured()
    # planner#0 1 + coder0#0 (1 + tool 5) + coder0#1 2 + reviewer 3 + planner#1 1; coder1's branch
    # (1 + 2 + 1) finishes 3 s before coder0's and does not count.
    assert job_bounds(workload(), turns, sessions, PromptSeconds()) == {"j000": 13.0}


def test_a_later_session_start_delays_its_turns_in_the_bound():
    turns, sessions = measured()
    sessions[1] = SessionRecord("j000-coder0", 14.0, 27.0)  # coder0 started 4 s after the job
    assert job_bounds(workload(), turns, sessions, PromptSeconds()) == {"j000": 16.0}


def test_a_job_with_a_failed_or_missing_turn_has_no_bound():
    turns, sessions = measured()
    turns[2].error = "boom"
    assert job_bounds(workload(), turns, sessions, PromptSeconds()) == {}
    assert job_bounds(workload(), turns[:-1], sessions, PromptSeconds()) == {}


def test_the_measured_chain_follows_the_prerequisite_that_finished_last():
    turns, sessions = measured()
    chains = measured_chains(workload(), turns, sessions, PromptSeconds())
    # planner#1 <- reviewer <- coder0#1 (done 21.0, after coder1's 16.5) <- coder0#0 <- planner#0
    assert chains == {"j000": {"latency_s": 17.0, "tool_s": 5.0, "llm_s": 12.0, "modelled_compute_s": 8.0}}


def test_bound_figures_are_means_and_shares_of_the_chains():
    turns, sessions = measured()
    figures = bound_figures(workload(), turns, sessions, PromptSeconds())
    assert figures == {
        "job_latency_bound_mean_s": 13.0,
        "job_latency_bounds_s": [13.0],
        "jobs_below_bound": 0,
        "chain_tool_share": 5.0 / 17.0,
        "chain_llm_share": 12.0 / 17.0,
        "chain_modelled_compute_share": 8.0 / 17.0,
    }


def test_a_turns_modelled_compute_is_its_prefill_after_the_cache_and_its_decode_steps_at_batch_one():
    cost = ComputeCost(target_model("deepseek-v3.2"), target_gpu("h800"))
    turn_cost = TurnCost(cost, dilation=0.5)
    prefill = cost.prefill_s(2048, 512)
    decode = cost.decode_step_s([2561]) + cost.decode_step_s([2562]) + cost.decode_step_s([2563])
    assert turn_cost.service_s(2560, 2048, 4) == pytest.approx((prefill + decode) * 0.5, rel=1e-12)
    # more cached than the prompt (never reported, but bounded): the whole prompt is cached
    assert turn_cost.service_s(100, 500, 1) == cost.prefill_s(100, 0) * 0.5
    rec = TurnRecord("s", 1, False, 0.0, prompt_tokens=2560, expected_cached_tokens=2048, output_tokens=4)
    assert turn_cost.of(rec) == turn_cost.service_s(2560, 2048, 4)
    rec.cached_tokens = 2304  # the server found a shared block beyond the session's own context
    assert turn_cost.of(rec) == turn_cost.service_s(2560, 2304, 4)


def test_a_job_measured_faster_than_its_bound_is_counted():
    turns, _ = measured()
    sessions = [SessionRecord(s.session_id, 15.0, 27.0) for s in measured()[1]]  # 12 s, against a 13 s bound
    assert bound_figures(workload(), turns, sessions, PromptSeconds())["jobs_below_bound"] == 1
