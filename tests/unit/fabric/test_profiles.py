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
