"""KV bytes by path, per-tier hits and NIC utilisation from the services' own measurements, and
honest gaps where a service does not export one."""

import pytest

from agentserve.bench.common.spans import KVTransfer
from agentserve.bench.papers.replay.prom import Scrape, parse_metrics
from agentserve.bench.papers.replay.service_metrics import kv_bytes, nic_utilization, phase_seconds, tier_hits

pytestmark = pytest.mark.unit


def _scrape(t: float, **targets: str) -> Scrape:
    return Scrape(t, {name: parse_metrics(text) for name, text in targets.items()})


def _kv(a: float, persist: float) -> str:
    return (
        "# TYPE agentserve_kv_transfer_bytes counter\n"
        f'agentserve_kv_transfer_bytes_total{{path="A",link="snic"}} {a}\n'
        f'agentserve_kv_transfer_bytes_total{{path="persist",link="snic"}} {persist}\n'
        "# TYPE agentserve_scheduler_kv_path_turns counter\n"
        'agentserve_scheduler_kv_path_turns_total{path="A"} 99\n'
    )


def test_kv_bytes_from_path_labelled_counters_are_deltas_over_the_run():
    scrapes = [
        _scrape(100.0, prefill=_kv(10, 5), decode=_kv(0, 1)),
        _scrape(102.0, prefill=_kv(30, 5), decode=_kv(0, 1)),
        _scrape(104.0, prefill=_kv(30, 45), decode=_kv(4, 1)),
    ]
    out = kv_bytes(scrapes, None, start_unix_s=100.0, bin_s=1.0)
    assert out["by_path"] == {"A": 24, "B": 0, "handoff": 0, "offload": 0, "persist": 40, "prefetch": 0}
    assert out["timeline"]["t_s"] == [2.0, 4.0]
    assert out["timeline"]["by_path"]["A"] == [20, 4] and out["timeline"]["by_path"]["persist"] == [0, 40]


def test_kv_bytes_from_spans_binned_by_end_time_and_null_with_reason_without_a_source():
    spans = [
        KVTransfer(100.5, "A", 10),
        KVTransfer(101.2, "handoff", 7),
        KVTransfer(101.9, "A", 5),
        KVTransfer(103.0, "relay", 2),
    ]
    out = kv_bytes([], spans, start_unix_s=100.0, bin_s=1.0)
    assert out["source"] == "kv.transfer spans"
    assert out["by_path"]["A"] == 15 and out["by_path"]["handoff"] == 7 and out["by_path"]["relay"] == 2
    assert out["by_path"]["B"] == 0
    assert out["timeline"]["by_path"]["A"] == [10, 5, 0, 0] and out["timeline"]["t_s"] == [1.0, 2.0, 3.0, 4.0]
    missing = kv_bytes([], None, 100.0, 1.0)
    assert missing["by_path"] is None and "no service exports" in missing["reason"]


def _tiers(dram: float, ssd: float) -> str:
    return (
        "# TYPE agentserve_kvstore_tier_hits gauge\n"
        f'agentserve_kvstore_tier_hits{{tier="dram"}} {dram}\nagentserve_kvstore_tier_hits{{tier="ssd"}} {ssd}\n'
    )


def test_tier_hits_are_store_reads_in_tokens_and_the_rest_of_the_hits_is_engine_memory():
    scrapes = [_scrape(0, kvstore=_tiers(3, 1)), _scrape(9, kvstore=_tiers(8, 3))]
    out = tier_hits(scrapes, prompt_tokens=1000, cached_tokens=400, block_tokens=16)
    assert out["by_tier"] == {"dram": 0.08, "ssd": 0.032, "engine": pytest.approx(0.288)}
    assert tier_hits([], 1000, 400, 16)["by_tier"] is None
    assert "does not export" in tier_hits([_scrape(0, kvstore=""), _scrape(1, kvstore="")], 10, 1, 16)["reason"]


def _nic(snic_busy: float, cnic_busy: float, gbps: float = 100.0) -> str:
    return (
        f'# TYPE agentserve_nic_configured_gbps gauge\nagentserve_nic_configured_gbps{{nic="snic"}} {gbps}\n'
        f'agentserve_nic_configured_gbps{{nic="cnic"}} {gbps}\n'
        "# TYPE agentserve_nic_busy_seconds counter\n"
        f'agentserve_nic_busy_seconds_total{{nic="snic"}} {snic_busy}\n'
        f'agentserve_nic_busy_seconds_total{{nic="cnic"}} {cnic_busy}\n'
    )


def test_nic_utilisation_is_busy_time_over_elapsed_time_per_nic():
    scrapes = [
        _scrape(10.0, prefill=_nic(1, 0), decode=_nic(0, 0)),
        _scrape(20.0, prefill=_nic(6, 2), decode=_nic(1, 0)),
    ]
    out = nic_utilization(scrapes)
    assert out["per_nic"] == {"prefill/cnic": 0.2, "prefill/snic": 0.5, "decode/cnic": 0.0, "decode/snic": 0.1}
    assert out["max"] == 0.5 and out["avg"] == pytest.approx(0.2)
    none = nic_utilization([_scrape(0, prefill=""), _scrape(1, prefill="")])
    assert none["per_nic"] is None and "agentserve_nic_busy_seconds" in none["reason"]


def test_unshaped_nics_have_no_utilisation():
    scrapes = [_scrape(0.0, prefill=_nic(0, 0, gbps=0)), _scrape(5.0, prefill=_nic(0, 0, gbps=0))]
    out = nic_utilization(scrapes)
    assert out["per_nic"] == {"prefill/cnic": None, "prefill/snic": None} and out["max"] is None
    assert "unshaped" in out["reason"]


def _phases(session_wait: float, prefill: float, count: int, compute: float, wait: float) -> str:
    return (
        "# TYPE agentserve_scheduler_turn_phase_seconds histogram\n"
        f'agentserve_scheduler_turn_phase_seconds_sum{{phase="session_wait",turn="later"}} {session_wait}\n'
        f'agentserve_scheduler_turn_phase_seconds_count{{phase="session_wait",turn="later"}} {count}\n'
        f'agentserve_scheduler_turn_phase_seconds_bucket{{phase="session_wait",turn="later",le="+Inf"}} {count}\n'
        "# TYPE agentserve_prefill_phase_seconds histogram\n"
        f'agentserve_prefill_phase_seconds_sum{{phase="forward",turn="later"}} {prefill}\n'
        f'agentserve_prefill_phase_seconds_count{{phase="forward",turn="later"}} {count}\n'
        "# TYPE agentserve_engine_forward_seconds counter\n"
        f'agentserve_engine_forward_seconds_total{{kind="compute"}} {compute}\n'
        f'agentserve_engine_forward_seconds_total{{kind="layer_wait"}} {wait}\n'
    )


def test_phase_seconds_are_deltas_over_the_run_summed_over_services_and_forwards_per_engine():
    scrapes = [
        _scrape(100.0, **{"prefill-0": _phases(0, 2.0, 1, 5.0, 1.0), "prefill-1": _phases(0, 0.0, 0, 0.0, 0.0)}),
        _scrape(110.0, **{"prefill-0": _phases(0, 6.0, 3, 9.0, 1.5), "prefill-1": _phases(0, 3.0, 1, 2.0, 0.0)}),
    ]
    out = phase_seconds(scrapes)
    assert out["elapsed_s"] == 10.0
    assert out["phases"]["prefill"] == {"later": {"forward": {"sum_s": 7.0, "count": 3.0}}}
    assert out["phases"]["scheduler"] == {"later": {"session_wait": {"sum_s": 0.0, "count": 3.0}}}
    assert out["forward_s"] == {
        "prefill-0": {"compute": 4.0, "layer_wait": 0.5},
        "prefill-1": {"compute": 2.0, "layer_wait": 0.0},
    }
    assert phase_seconds(scrapes[:1]) == {"phases": {}, "forward_s": {}, "elapsed_s": None}
