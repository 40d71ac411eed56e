from agentserve.sim.cluster import SimCluster
from agentserve.sim.config import SimConfig
from agentserve.sim.events import EventLoop
from agentserve.sim.policies import resolve


def test_engines_fill_nodes_and_a_partial_node_has_its_engines_shares_of_the_storage_nic() -> None:
    config = SimConfig(prefill_engines=2, decode_engines=10, gpus_per_node=8, snic_gbps=400.0, decode_pool_blocks=512)
    cluster = SimCluster(EventLoop(), config, resolve("dualpath"), lambda turn: None)
    assert sorted(cluster.prefills) == ["prefill-0-0", "prefill-0-1"]
    assert len(cluster.decodes) == 10 and cluster.node_of["decode-1-1"] == "decode1"
    rates = {node: link.bytes_per_s * 8 / 1e9 for node, link in cluster.snics.items()}
    assert rates == {"prefill0": 100.0, "decode0": 400.0, "decode1": 100.0}
    assert cluster.pool_blocks == {"prefill": config.pool_blocks("prefill"), "decode": 512}
    # Every engine is registered with the scheduler's registry and reports its node's SNIC rate.
    engine = cluster.registry.get("decode-1-0")
    assert engine is not None and engine.status.nic("snic").configured_gbps == 100.0
    assert engine.status.total_kv_blocks == 512
