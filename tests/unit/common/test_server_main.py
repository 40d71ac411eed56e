"""`server.main`, every service's entry point: typed config from flags, the service built from it,
served with the settings the config names; a bad flag exits naming the service."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agentserve.common import server

pytestmark = pytest.mark.unit


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    host: str = "127.0.0.1"
    grpc_port: int = 50099
    metrics_port: int = 0
    internal_tls_dir: str = ""

    def __post_init__(self) -> None:
        if self.grpc_port <= 0:
            raise ValueError(f"grpc_port must be positive, got {self.grpc_port}")


class ToyService(server.Service):
    def __init__(self, config: ToyConfig) -> None:
        self.config = config


def test_main_builds_the_service_from_flags_and_serves_it(monkeypatch) -> None:
    served = []

    async def serve(service, settings):
        served.append((service, settings))

    monkeypatch.setattr(server, "serve", serve)
    monkeypatch.setattr("uvloop.run", asyncio.run)
    server.main("toy", ToyConfig, ToyService, ["--grpc-port", "6100", "--metrics-port", "6101"])
    ((service, settings),) = served
    assert isinstance(service, ToyService) and service.config == ToyConfig(grpc_port=6100, metrics_port=6101)
    assert settings == server.ServerSettings("toy", "127.0.0.1", 6100, 6101)


@pytest.mark.parametrize("argv", [["--grpc-port", "0"], ["--no-such-flag", "1"]])
def test_a_bad_config_exits_naming_the_service(argv) -> None:
    with pytest.raises(SystemExit) as exited:
        server.main("toy", ToyConfig, ToyService, argv)
    assert str(exited.value.code).startswith("toy: ")
