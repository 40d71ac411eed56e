"""load_config: flags over environment over defaults, with clear errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentserve.common.config import load_config

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Example:
    grpc_port: int = 50051
    data_dir: str = "/tmp/x"
    fsync: bool = True
    ratio: float = 0.5

    def __post_init__(self):
        if self.grpc_port <= 0:
            raise ValueError("grpc_port must be positive")


def test_defaults_env_and_flags_layer():
    assert load_config(Example, [], env={}) == Example()
    env = {"AGENTSERVE_GRPC_PORT": "6000", "AGENTSERVE_FSYNC": "false"}
    assert load_config(Example, [], env=env) == Example(grpc_port=6000, fsync=False)
    assert load_config(Example, ["--grpc-port", "7000", "--ratio", "0.25"], env=env) == Example(
        grpc_port=7000, fsync=False, ratio=0.25
    )


def test_bad_values_are_value_errors():
    with pytest.raises(ValueError, match="AGENTSERVE_GRPC_PORT"):
        load_config(Example, [], env={"AGENTSERVE_GRPC_PORT": "many"})
    with pytest.raises(ValueError, match="AGENTSERVE_FSYNC"):
        load_config(Example, [], env={"AGENTSERVE_FSYNC": "maybe"})
    with pytest.raises(ValueError, match="grpc_port must be positive"):
        load_config(Example, ["--grpc-port", "-1"], env={})
    with pytest.raises(ValueError):
        load_config(Example, ["--no-such-flag", "1"], env={})
