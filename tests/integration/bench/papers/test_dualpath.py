"""`agentserve bench dualpath` end to end at tiny scale: every policy on a real local cluster of its
own (kvstore, scheduler, 2 prefill and 4 decode engines, tool proxy as processes), emulated compute
on the paper's profile. Every policy serves every turn, the output has every must-show key with the
regime it was measured in, and the report files are written."""

from __future__ import annotations

import json

import pytest

from agentserve.bench.papers.dualpath.policies import POLICY_NAMES
from agentserve.bench.papers.dualpath.ratios import TARGETS
from agentserve.cli.main import build_parser

pytestmark = pytest.mark.integration

AGENTS, TURNS = 2, 3


def test_every_policy_serves_every_turn_and_reports_every_key(tmp_path):
    args = build_parser().parse_args(
        [
            "bench",
            "dualpath",
            "--agents",
            str(AGENTS),
            "--turns",
            str(TURNS),
            "--first-context",
            "256",
            "--final-context",
            "512",
            "--output-tokens",
            "4",
            "--shared-prefix",
            "128",
            "--block-size",
            "16",
            "--online-duration",
            "2",
            "--online-start",
            "1",
            "--online-max",
            "1",
            "--online-probes",
            "2",
            "--slo",
            "ttft_p90=600s,tpot_p90=60s",
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    result = args.func(args)

    assert set(result["policies"]) == set(POLICY_NAMES)
    for name, p in result["policies"].items():
        assert p["unavailable"] is None, name
        run = p["offline"]
        assert (run["turns_ok"], run["turns_failed"]) == (AGENTS * TURNS, 0), (name, run["failures"])
        assert set(run["snic"]["utilization"]) == {"prefill-0", "prefill-1", *(f"decode-{i}" for i in range(4))}
    for t in TARGETS:
        assert result[t.key] is not None, t.key
        assert result["targets"][t.key]["value"] == result[t.key]
    for name in ("baseline", "dualpath"):
        capacity = result["policies"][name]["capacity"]
        assert capacity["capacity_agents_per_s"] == 1.0  # the loose SLO passes at the only load probed
    regime = result["regime"]
    assert regime["compute"] == "emulated" and regime["profile"] == "dualpath-h800"
    assert regime["workload"]["agents"] == AGENTS and regime["workload"]["turns_per_agent"] == TURNS
    assert regime["cluster"]["prefill_engines"] == 2 and regime["cluster"]["decode_engines"] == 4
    assert result["cpu_floor"]["turns_ok"] == AGENTS * TURNS
    # The regime the run was in: modelled from the workload, measured per policy on both sides.
    storage = result["storage_regime"]
    assert storage["modelled"]["agents_per_prefill_engine"] == AGENTS / 2
    nics = storage["measured"]["storage_nics"]
    assert set(nics) == set(POLICY_NAMES)
    for name, sides in nics.items():
        assert set(sides) == {"prefill", "decode"} and sides["prefill"]["busy_share_max"] is not None, name
    # The baseline reads every later turn's history over its prefill side's storage NICs (path A).
    assert nics["baseline"]["prefill"]["busy_share_max"] > 0 and nics["baseline"]["prefill"]["gbps_moved"] > 0
    assert storage["measured"]["path_a"]["policy"] == "layerwise"
    # Every cluster's shared prefixes were computed before the runs, while the next clusters started.
    for name, p in result["policies"].items():
        assert set(p["phases_s"]) >= {"start", "warm", "offline", "stop"}, name
    written = json.loads((tmp_path / "dualpath.json").read_text())
    assert written["offline_throughput_ratio"] == result["offline_throughput_ratio"]
    assert "## Must show" in (tmp_path / "dualpath.md").read_text()
    assert (tmp_path / "jct.png").is_file() and (tmp_path / "capacity.png").is_file()
