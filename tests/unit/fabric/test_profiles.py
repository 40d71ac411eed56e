"""Hardware profiles: the shipped YAML files load, scaling keeps the I/O-to-compute ratio, bad files fail clearly."""

from __future__ import annotations

import copy

import pytest

from agentserve.fabric.profiles import available_profiles, load_profile, parse_profile

pytestmark = pytest.mark.unit

DOC = {
    "name": "test-node",
    "decode_per_prefill": 2,
    "target": {"model": "m", "kv_bytes_per_token": 40_000, "prefill_tokens_per_s": 10_000},
    "engines": {
        "prefill": {"snic": {"gbps": 400, "latency_ms": 0.01}, "cnic": {"gbps": 200}},
        "decode": {"snic": {"gbps": 100}, "cnic": {"gbps": 0}},
    },
}


def test_shipped_profiles_load():
    assert {"h800-node", "local-unshaped"} <= set(available_profiles())
    h800 = load_profile("h800-node")
    assert h800.decode_per_prefill == 2
    assert (h800.engines["prefill"].snic.gbps, h800.engines["decode"].cnic.gbps) == (400, 400)
    unshaped = load_profile("local-unshaped")
    assert unshaped.target is None
    assert all(nics.snic.gbps == nics.cnic.gbps == 0 for nics in unshaped.engines.values())


def test_scaling_preserves_transfer_to_compute_ratio():
    profile = parse_profile(DOC)
    local_kv, local_tps = 4_000, 2_000  # a tenth of the KV per token, five times slower compute
    scaled = profile.scaled(local_kv, local_tps)
    assert scaled.time_dilation == pytest.approx(5.0)
    assert scaled.bandwidth_scale == pytest.approx(0.1 / 5.0)
    snic = scaled.engines["prefill"].snic
    assert (snic.gbps, snic.latency_ms) == (pytest.approx(8.0), pytest.approx(0.05))
    assert scaled.engines["decode"].cnic.gbps == 0  # unshaped stays unshaped
    tokens = 1_000_000
    target_ratio = (tokens * 40_000 * 8 / 400e9) / (tokens / 10_000)
    local_ratio = (tokens * local_kv * 8 / (snic.gbps * 1e9)) / (tokens / local_tps)
    assert local_ratio == pytest.approx(target_ratio)


def test_profile_without_target_is_used_literally():
    doc = copy.deepcopy(DOC)
    del doc["target"]
    scaled = parse_profile(doc).scaled(4_000, 2_000)
    assert (scaled.time_dilation, scaled.engines["prefill"].snic.gbps) == (1.0, 400)


def test_nics_are_built_per_role():
    nics = parse_profile(DOC).scaled(40_000, 10_000).nics("prefill")
    assert {name: (n.gbps, n.latency_ms) for name, n in nics.items()} == {"snic": (400, 0.01), "cnic": (200, 0.0)}
    with pytest.raises(ValueError, match="unknown engine role"):
        parse_profile(DOC).scaled(1, 1).nics("router")


def broken(path: str, value):
    doc = copy.deepcopy(DOC)
    *parents, key = path.split(".")
    node = doc
    for part in parents:
        node = node[part]
    if value is KeyError:
        del node[key]
    else:
        node[key] = value
    return doc


@pytest.mark.parametrize(
    "doc, message",
    [
        (broken("engines.prefill.snic.gbps", -1), "engines.prefill.snic: gbps must be >= 0"),
        (broken("engines.prefill.snic.gbps", True), "engines.prefill.snic.gbps: expected a number"),
        (broken("engines.decode.cnic", KeyError), "engines.decode: missing key"),
        (broken("engines.decode.nvlink", {"gbps": 1}), "engines.decode: unknown key"),
        (broken("engines.decode", KeyError), "engines must be exactly prefill, decode"),
        (broken("decode_per_prefill", 0), "decode_per_prefill must be positive"),
        (broken("catchup_ms", 0.5), "need 0 < burst_ms <= catchup_ms"),
        (broken("target.kv_bytes_per_token", 0), "must be positive"),
        (broken("tenants", 3), "unknown key"),
        (broken("name", KeyError), "missing key"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_bad_profiles_are_value_errors_naming_the_key(doc, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(doc, source="p.yaml")


def test_unknown_profile_lists_the_available_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTSERVE_PROFILES_DIR", str(tmp_path))
    (tmp_path / "mine.yaml").write_text(
        "name: mine\ndecode_per_prefill: 1\nengines: {prefill: {snic: {gbps: 1}, "
        "cnic: {gbps: 1}}, decode: {snic: {gbps: 1}, cnic: {gbps: 1}}}\n"
    )
    assert load_profile("mine").name == "mine"
    assert load_profile(tmp_path / "mine.yaml").name == "mine"
    with pytest.raises(ValueError, match="available: mine"):
        load_profile("h100-node")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ValueError, match="cannot read hardware profile"):
        load_profile(tmp_path / "bad.yaml")


NODE_DOC = {
    "name": "node",
    "node": {
        "gpus": 8,
        "snic": {"gbps": 400, "latency_ms": 0.005},
        "cnic": {"gbps": 400},
        "pd_ratio": "1:2",
        "gpu_tflops": 989,
    },
    "target": {"model": "deepseek-v3.2", "prefill_tokens_per_s": 9200},
}


def test_node_topology_shares_one_snic_among_the_nodes_engines():
    profile = parse_profile(NODE_DOC)
    for role in ("prefill", "decode"):
        assert profile.engines[role].snic.gbps == 50.0  # 400 Gbps / 8 GPUs
        assert profile.engines[role].cnic.gbps == 400.0
    assert profile.decode_per_prefill == 2.0
    assert profile.target is not None and profile.target.kv_bytes_per_token == 48_068  # from the cost model
    assert profile.with_pd_ratio("1:1").decode_per_prefill == 1.0
    two_snics = copy.deepcopy(NODE_DOC)
    two_snics["node"]["storage_nics"] = 2
    assert parse_profile(two_snics).engines["prefill"].snic.gbps == 100.0


def test_shipped_dualpath_profile_matches_the_paper():
    profile = load_profile("dualpath-h800")
    assert profile.node is not None and profile.node.to_dict() == {
        "gpus_per_node": 8,
        "storage_nics_per_node": 1,
        "snic_gbps": 400.0,
        "cnic_gbps_per_gpu": 400.0,
        "snic_gbps_per_engine": 50.0,
        "pd_ratio": "1:2",
        "gpu_tflops": 989.0,
    }
    assert load_profile("h800-node").node is None  # the per-GPU-SNIC profile loads as before
    with pytest.raises(ValueError, match="has no node topology"):
        load_profile("h800-node").with_pd_ratio("1:1")


def node_broken(key: str, value):
    doc = copy.deepcopy(NODE_DOC)
    doc["node"][key] = value
    return doc


@pytest.mark.parametrize(
    "doc, message",
    [
        (node_broken("pd_ratio", 62), r"node.pd_ratio: pd_ratio must look like 1:2"),
        (node_broken("pd_ratio", "0:2"), "pd_ratio needs positive counts"),
        (node_broken("gpus", 0), "node.gpus: expected a positive integer"),
        (node_broken("storage_nics", 1.5), "node.storage_nics: expected a positive integer"),
        (node_broken("nvlink", 1), "node: unknown key"),
        ({**NODE_DOC, "decode_per_prefill": 2}, "decode_per_prefill come from node"),
        ({"name": "x"}, "missing key.*engines, decode_per_prefill .or a node topology"),
        (
            {**NODE_DOC, "target": {"model": "mystery", "prefill_tokens_per_s": 1}},
            "kv_bytes_per_token is required unless model is one of",
        ),
    ],
)
def test_bad_node_topologies_name_the_key(doc, message):
    with pytest.raises(ValueError, match=message):
        parse_profile(doc, source="p.yaml")


def test_dilated_profile_divides_bandwidth_and_multiplies_latency_by_the_dilation():
    # Emulated compute charges the target's bytes, so only the time dilation scales the fabric.
    scaled = load_profile("dualpath-h800").dilated(10.0)
    assert (scaled.time_dilation, scaled.bandwidth_scale) == (10.0, 0.1)
    nics = scaled.engines["prefill"]
    assert (nics.snic.gbps, nics.cnic.gbps) == (pytest.approx(5.0), pytest.approx(40.0))  # 400/8/10, 400/10
    assert nics.snic.latency_ms == pytest.approx(0.05)
    with pytest.raises(ValueError, match="time_dilation must be positive"):
        load_profile("dualpath-h800").dilated(0)
