"""`sim validate`: a stored emulated run's configuration read back, and errors computed per metric."""

import json
from pathlib import Path
from typing import Any

import pytest

from agentserve.sim.validate import emulated_config, summary, validate

STORED = Path(__file__).resolve().parents[3] / "docs/dualpath/current/dualpath.json"


def _regime() -> dict[str, Any]:
    return {
        "target_model": "deepseek-v3.2",
        "time_dilation": 10.0,
        "node": {"gpus_per_node": 8, "storage_nics_per_node": 1, "snic_gbps": 400.0, "cnic_gbps_per_gpu": 400.0},
        "kv_pool": {"prefill_kv_blocks": 160, "decode_kv_blocks": 512},
        "cluster": {
            "prefill_engines": 1,
            "decode_engines": 1,
            "kv_block_tokens": 256,
            "turn_order": "least-served",
            "engine_settings": {"target_gpu": "h800"},
            "prefill_settings": {"load_order": "concurrent"},
        },
        "workload": {
            "agents": 2,
            "turns_per_agent": 2,
            "first_context_tokens": 8192,
            "final_context_tokens": 9216,
            "output_tokens_per_turn": 4,
            "shared_prefix_tokens": 7680,
            "seed": 0,
        },
    }


def test_the_stored_emulated_run_maps_to_its_configuration() -> None:
    config, workload, orders, dilation = emulated_config(json.loads(STORED.read_text()))
    assert (config.engines("prefill"), config.engines("decode")) == (2, 4)
    assert (config.pool_blocks("prefill"), config.pool_blocks("decode")) == (160, 512)
    assert config.snic_share_bytes_per_s == 50e9 / 8  # each engine its static share, not shared
    assert config.gpus_per_node == 1
    assert workload.agents == 12 and dilation == 10.0
    assert orders == {"turn_order": "least-served", "load_order": "concurrent"}


def test_every_validation_config_is_a_valid_bench_dualpath_invocation() -> None:
    from agentserve.bench.papers.dualpath.cli import bench_spec
    from agentserve.cli.main import build_parser
    from agentserve.sim.cli_args import VALIDATION_CONFIGS
    from agentserve.sim.validate import CHECKS

    assert set(VALIDATION_CONFIGS) <= set(CHECKS)
    for check in CHECKS.values():
        spec = bench_spec(build_parser().parse_args(["bench", "dualpath", *check.bench_args, "--one-at-a-time"]))
        assert not spec.concurrent and spec.workload.turns in (4, 6)


def test_relative_errors_are_against_the_emulated_figures_in_target_units(tmp_path: Path) -> None:
    # An "emulated" run whose local figures are exactly 10x the simulator's target ones, but for
    # the baseline's JCT, 25% longer: the errors must be 0 but that one.
    from agentserve.bench.papers.dualpath.workload import generate
    from agentserve.sim.policies import resolve
    from agentserve.sim.run import figures, simulate

    regime = _regime()
    config, spec, orders, _ = emulated_config({"regime": regime})
    policies = {}
    for name in ("baseline", "dualpath"):
        sim = figures(simulate(config, resolve(name, orders["turn_order"]), generate(spec)))
        policies[name] = {
            "offline": {
                "jct_s": sim["jct_s"] * 10 * (1.25 if name == "baseline" else 1.0),
                "turns_per_s": sim["turns_per_s"] / 10,
                "ttft_p50_ms": sim["ttft_p50_ms"] * 10,
                "ttft_p90_ms": sim["ttft_p90_ms"] * 10,
                "tpot_p90_ms": sim["tpot_p90_ms"] * 10,
            }
        }
    path = tmp_path / "dualpath.json"
    path.write_text(json.dumps({"regime": regime, "policies": policies}))
    result = validate(path)
    assert result["emulated_run"] == str(path)
    assert result["policies"]["baseline"]["jct_s"]["rel_error"] == pytest.approx(1 / 1.25 - 1)
    assert result["policies"]["dualpath"]["jct_s"]["rel_error"] == pytest.approx(0.0, abs=1e-12)
    assert result["max_rel_error"] == pytest.approx(0.2)
    assert result["max_rel_error_p90"] == pytest.approx(0.0, abs=1e-12)
    assert result["ranking_agrees"] is True
    both = summary({"a": result, "b": {**result, "max_rel_error": 0.05, "ranking_agrees": False}})
    assert both["max_rel_error"] == pytest.approx(0.2) and both["ranking_agrees"] is False


def test_the_docs_validation_table_is_what_validate_computes_from_the_stored_emulated_run() -> None:
    """docs/sim/validate.json is `sim validate --emulated` over the stored pool-bound run; the
    simulator is deterministic, so the comparison is reproduced exactly, error by error."""
    root = Path(__file__).resolve().parents[3]
    stored = "docs/sim/validate/pool-bound/dualpath.json"
    table = json.loads((root / "docs/sim/validate.json").read_text())["configs"][stored]
    assert validate(root / stored) == {**table, "emulated_run": str(root / stored)}
