"""`agentserve profile show`: a profile's NICs and each target model's cache-compute ratio."""

from __future__ import annotations

import json

import pytest

from agentserve.cli.main import main

pytestmark = pytest.mark.unit


def show(capsys, *argv: str) -> dict:
    assert main(["profile", "show", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_dualpath_profile_prints_deepseek_ratio_beside_the_snic_share(capsys):
    report = show(capsys, "dualpath-h800", "--model", "deepseek-v3.2")
    assert report["engine_nics_gbps"]["prefill"] == {"snic": 50.0, "cnic": 400.0}
    assert report["decode_per_prefill"] == 2.0
    assert report["models"] == [
        {
            "model": "deepseek-v3.2",
            "context_tokens": 32_700,
            "new_tokens": 429,
            "hit_ratio": 0.9869,
            "kv_gb_loaded": 1.5512,
            "prefill_tflops": 60.602,
            "cache_compute_gb_per_pflop": 25.6,
            "kv_bytes_per_token": 48_068,
            # 50 Gbps = 6.25 GB/s over 0.989 PFLOP/s
            "snic_gb_per_pflop": 6.32,
            "snic_bound_mfu": 0.2469,
            # prefill reads through all three nodes' SNICs (P:D 1:2)
            "pooled_snic_bound_mfu": 0.7407,
        }
    ]


def test_every_model_by_default_and_the_turn_is_selectable(capsys):
    report = show(capsys, "h800-node", "--hit-ratio", "0.987", "--context", "32700")
    assert [m["model"] for m in report["models"]] == ["deepseek-v3.2", "dense-27b", "qwen2.5-32b"]
    assert {m["new_tokens"] for m in report["models"]} == {425}
    assert report["node"] is None and "snic_bound_mfu" not in report["models"][0]
    one_to_one = show(capsys, "dualpath-h800", "--pd-ratio", "1:1", "--model", "qwen2.5-32b")
    assert one_to_one["node"]["pd_ratio"] == "1:1" and one_to_one["decode_per_prefill"] == 1.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["dualpath-h800", "--model", "gpt"], "unknown target model 'gpt'"),
        (["dualpath-h800", "--pd-ratio", "1-2"], "pd_ratio must look like 1:2"),
        (["h800-node", "--pd-ratio", "1:1"], "has no node topology"),
        (["dualpath-h800", "--new-tokens", "0"], "new_tokens must be in 1..context_tokens"),
    ],
)
def test_bad_arguments_are_clear_errors(capsys, argv, message):
    assert main(["profile", "show", *argv]) == 2
    assert message in capsys.readouterr().err
