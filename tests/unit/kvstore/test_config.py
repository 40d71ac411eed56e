import pytest

from agentserve.common.config import load_config
from agentserve.kvstore.config import KVStoreConfig

pytestmark = pytest.mark.unit


def test_flags_and_env_build_the_config():
    config = load_config(
        KVStoreConfig,
        ["--grpc-port", "6000", "--fsync", "false"],
        env={"AGENTSERVE_DATA_DIR": "/data/kv", "AGENTSERVE_GRPC_PORT": "5000"},
    )
    assert config == KVStoreConfig(grpc_port=6000, data_dir="/data/kv", fsync=False)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"grpc_port": 0}, "grpc_port"),
        ({"metrics_port": 70000}, "metrics_port"),
        ({"metrics_port": 50052}, "must differ"),
        ({"data_dir": ""}, "data_dir"),
        ({"host": ""}, "host"),
        ({"max_block_bytes": 0}, "max_block_bytes"),
        ({"max_block_bytes": 1 << 30}, "max_block_bytes"),
    ],
)
def test_bad_settings_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KVStoreConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dram_budget_bytes": -1}, "dram_budget_bytes"),
        ({"ssd_budget_bytes": 1 << 20}, "ssd_budget_bytes must be at least max_block_bytes"),
    ],
)
def test_bad_budgets_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KVStoreConfig(**kwargs)


def test_scaled_out_instances_on_one_volume_claim_their_own_dirs(tmp_path):
    from agentserve.kvstore.service import open_store

    config = KVStoreConfig(data_dir=str(tmp_path), claim_instance_dir=True)
    first, second = open_store(config), open_store(config)
    try:
        assert (first.ssd.root.parent.name, second.ssd.root.parent.name) == ("instance-0", "instance-1")
    finally:
        first.close()
    third = open_store(config)  # a restarted instance takes the freed dir, and the blocks in it
    try:
        assert third.ssd.root.parent.name == "instance-0"
    finally:
        second.close()
        third.close()
