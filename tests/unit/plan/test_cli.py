"""`agentserve plan`'s validation of its options: each bad value is refused before any simulation,
with a message naming the option; and the stated defaults."""

from __future__ import annotations

import pytest

from agentserve.cli.main import build_parser, main
from agentserve.plan.planner import DEFAULT_SLO
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--workload", "coding", "--slo", "ttft_first=4s"], "--slo"),
        (["--workload", "coding", "--slo", "ttft_first_p100=4s"], "--slo"),
        (["--workload", "coding", "--gpu-hour-cost", "0"], "--gpu-hour-cost"),
        (["--workload", "coding", "--gpu-hour-cost", "cheap"], "--gpu-hour-cost"),
        (["--workload", "coding", "--snic-cost", "-1"], "--snic-cost"),
        (["--workload", "coding", "--policies", "dualpath,fastest"], "--policies"),
        (["--workload", "coding", "--snic-gbps", "400,0"], "--snic-gbps"),
        (["--workload", "coding", "--lifecycles", "agentserve,keep-all"], "--lifecycles"),
        (["--workload", "coding", "--lifecycles", ","], "--lifecycles"),
        (["--workload", "coding", "--max-gpus", "1"], "--max-gpus"),
        (["--workload", "coding", "--window", "0"], "--window"),
        (["--workload", "coding", "--model", "gpt-9"], "--model"),
        (["--workload", "coding", "--gpu", "tpu"], "--gpu"),
        (["--elastic", "--startup", "-5"], "--startup"),
        (["--elastic", "--day-sessions", "0"], "--day-sessions"),
        (["--elastic", "--scaling", "kv_target=1.5"], "--scaling: elastic kv_target must be in (0, 1]"),
        (["--elastic", "--scaling", "peak_sessions_per_s=1"], "--scaling: 'peak_sessions_per_s=1' is not key=value"),
        (["--elastic", "--scaling", "forecast=yes"], "--scaling: forecast takes 0 or 1"),
        (["--elastic", "--scaling", "ewma_s=slow"], "--scaling: ewma_s='slow' is not a number"),
    ],
)
def test_a_bad_option_is_refused_by_the_parser_naming_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", *argv])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([], "--workload is required"),
        (["--workload", "no/such/trace.jsonl"], "--workload 'no/such/trace.jsonl'"),
        (["--workload", "coding:agents=3"], "unknown key 'agents'"),
        (["--workload", "coding:rate=0"], "coding rate must be > 0"),
        (["--workload", "coding:rate=fast"], "rate='fast' is not a number"),
        (["--workload", "README.md"], "--workload README.md: neither a Mooncake trace"),
        (["--elastic", "--multi"], "--elastic and --multi"),
        (
            ["--multi", "--serve", "deepseek-v3.2", "--serve", "x=coding"],
            "--serve 'deepseek-v3.2': expected MODEL=WORKLOAD",
        ),
        (["--multi", "--serve", "gpt-9=coding", "--serve", "dense-27b=coding"], "unknown target model"),
        (["--multi", "--serve", "dense-27b=coding"], "--serve: --multi places two models, got 1"),
    ],
)
def test_a_bad_workload_or_combination_is_an_error_naming_it(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentserve: error:") and named in err


def test_every_option_but_the_workload_has_a_stated_default() -> None:
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]  # type: ignore[union-attr]
    for action in plan._actions:
        if action.dest in ("help", "workload", "json", "progress", "elastic", "multi"):
            continue
        assert "default" in (action.help or ""), f"--{action.dest} states no default"
    args = build_parser().parse_args(["plan", "--workload", "coding"])
    assert args.slo == DEFAULT_SLO and "ttft_first_p90" in DEFAULT_SLO and "ttft_later_p90" in DEFAULT_SLO
    assert args.lifecycles == LIFECYCLE_POLICIES  # every lifecycle policy, by registry name
    assert build_parser().parse_args(["plan", "--workload", "coding", "--lifecycles", "none"]).lifecycles == ()
    assert args.scaling == {}  # the scaling policy's defaults
    scaled = build_parser().parse_args(["plan", "--elastic", "--scaling", "forecast=1,kv_target=0.92"])
    assert scaled.scaling == {"forecast": True, "kv_target": 0.92}
