"""SchedulerConfig validation, engine error translation, and the service's lifecycle hooks."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentserve.common.config import load_config
from agentserve.common.errors import RetryableError
from agentserve.common.http_guard import ConnectionLimits
from agentserve.common.server import ServerSettings
from agentserve.scheduler import service as service_module
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.engine_clients import EngineUnavailable, translate
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.service import SchedulerService
from tests.unit.scheduler.fakes import run

pytestmark = pytest.mark.unit


def test_defaults_and_flags_over_env() -> None:
    config = load_config(
        SchedulerConfig, ["--grpc-port", "6001"], env={"AGENTSERVE_TURN_RETRIES": "2", "AGENTSERVE_GRPC_PORT": "6000"}
    )
    assert (config.grpc_port, config.turn_retries, config.http_port) == (6001, 2, 8000)
    assert config.model_name == "agentserve-tiny"
    assert config.kv_path_policy == "dualpath"
    assert (config.prefill_policy, config.relay_policy) == ("least-loaded", "turn-decode")
    assert (config.prefill_alpha_ms, config.prefill_beta) == (100.0, 1.5)
    policies = load_config(
        SchedulerConfig,
        ["--prefill-policy", "dualpath", "--prefill-alpha-ms", "20", "--relay-policy", "other-decode"],
        env={"AGENTSERVE_PREFILL_BETA": "2.5", "AGENTSERVE_KV_PATH_POLICY": "split"},
    )
    assert (policies.prefill_policy, policies.prefill_alpha_ms, policies.prefill_beta) == ("dualpath", 20.0, 2.5)
    assert (policies.relay_policy, policies.kv_path_policy) == ("other-decode", "split")
    assert (config.fairness, config.max_running_turns, config.max_inflight_turns) == ("wfq", 64, 256)
    assert config.http == ConnectionLimits(header_timeout_s=10.0, body_timeout_s=30.0, max_connections_per_client=256)
    bounded = load_config(
        SchedulerConfig,
        ["--http-header-timeout-s", "2", "--fairness", "fifo"],
        env={"AGENTSERVE_HTTP_BODY_TIMEOUT_S": "3"},
    )
    assert (bounded.fairness, bounded.http.header_timeout_s, bounded.http.body_timeout_s) == ("fifo", 2.0, 3.0)
    with pytest.raises(ValueError, match="header_timeout_s must be a positive number of seconds, got 0"):
        load_config(SchedulerConfig, ["--http-header-timeout-s", "0"], env={})


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(grpc_port=0), "grpc_port"),
        (dict(http_port=70000), "http_port"),
        (dict(metrics_port=50051), "must differ"),
        (dict(kvstore_address="nohost"), "host:port"),
        (dict(heartbeat_interval_ms=0), "heartbeat_interval_ms must be positive"),
        (dict(engine_timeout_ms=1500), "at least twice"),
        (dict(max_message_tokens=0), "max_message_tokens"),
        (dict(turn_retries=-1), "turn_retries"),
        (dict(model_name=""), "model_name"),
        (dict(kv_path_policy="fastest"), "kv_path_policy must be one of dualpath, always-a, always-b, split"),
        (dict(prefill_policy="random"), "prefill_policy must be one of least-loaded, dualpath, got 'random'"),
        (dict(relay_policy="any"), "relay_policy must be one of turn-decode, dualpath, other-decode, got 'any'"),
        (dict(prefill_alpha_ms=-1.0), "prefill_alpha_ms must be a finite number >= 0, got -1.0"),
        (dict(prefill_alpha_ms=float("nan")), "prefill_alpha_ms must be a finite number >= 0, got nan"),
        (dict(prefill_beta=0.9), "prefill_beta must be a finite number >= 1, got 0.9"),
        (dict(api_keys="acme:short"), "AGENTSERVE_API_KEYS, entry 1: the key must be at least 20"),
        (dict(api_keys_file="/nonexistent/keys"), "api_keys_file '/nonexistent/keys'"),
        (dict(max_sessions_per_tenant=0), "max_sessions_per_tenant must be positive"),
        (dict(max_inflight_turns=-1), "max_inflight_turns must be >= 0"),
        (dict(session_ttl_s=float("inf")), "session_ttl_s must be a positive number"),
        (dict(tenant_turns_per_s=-1.0), "tenant_turns_per_s must be >= 0"),
        (dict(max_body_bytes=0), "max_body_bytes must be positive"),
        (dict(decode_stall_timeout_ms=-1), "decode_stall_timeout_ms must be >= 0"),
        (dict(prefill_timeout_ms=-5), "prefill_timeout_ms must be >= 0"),
        (dict(decode_timeout_ms=-5), "decode_timeout_ms must be >= 0"),
        (
            dict(kv_lifecycle="continuum"),
            "kv_lifecycle must be one of lru, ttl-pin, offload, tokencake, agentserve, got 'continuum'",
        ),
        (dict(reload_s_per_block=-0.1), "reload_s_per_block must be a finite number >= 0, got -0.1"),
        (dict(park_min_wait_s=float("inf")), "park_min_wait_s must be a finite number >= 0, got inf"),
        (dict(kv_commit_ratio=-1.0), "kv_commit_ratio must be a finite number >= 0, got -1.0"),
        (dict(tool_seeds="search"), "tool_seeds: 'search' is not name=seconds"),
        (dict(max_running_turns=-1), "max_running_turns must be >= 0"),
        (dict(fairness="drr"), "fairness must be one of wfq, fifo, got 'drr'"),
        (dict(api_keys="acme:as-key-of-acme-0123456789 weight=-2"), "entry 1: weight must be a positive number"),
        (dict(state="zookeeper"), "state must be one of sqlite, etcd, got 'zookeeper'"),
        (dict(state="etcd"), "state etcd needs etcd_endpoints"),
        (dict(state="etcd", etcd_endpoints=("e:2379",), session_db="/s.db"), "session_db is the sqlite state's"),
        (dict(state="etcd", etcd_endpoints=("e:2379",), etcd_prefix="agentserve"), "etcd_prefix must start and end"),
        (dict(state="etcd", etcd_endpoints=("e:2379",), etcd_lease_s=1), "etcd_lease_s must be at least 2"),
    ],
)
def test_bad_config(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SchedulerConfig(**fields)


def rpc_error(code: grpc.StatusCode, details: str = "boom") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def test_engine_errors_become_domain_errors() -> None:
    gone = translate(rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused"), "h:1")
    assert isinstance(gone, EngineUnavailable) and gone.address == "h:1" and "connection refused" in gone.detail
    bad = translate(rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "token id 9 out of range"), "h:1")
    assert isinstance(bad, ValueError) and str(bad) == "token id 9 out of range"
    assert isinstance(translate(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED), "h:1"), RetryableError)
    assert type(translate(rpc_error(grpc.StatusCode.INTERNAL), "h:1")) is RuntimeError
    late = translate(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline"), "h:1")
    assert isinstance(late, EngineUnavailable) and late.detail == "DEADLINE_EXCEEDED: deadline"


class FakeRunner:
    def __init__(self) -> None:
        self.cleaned = False

    async def cleanup(self) -> None:
        self.cleaned = True


class SweepClock:
    """The registry's clock and the sweeper's sleep: a sleep waits for `tick()`, then moves the
    clock on by its delay, so the test decides when each sweep runs and how old registrations are."""

    def __init__(self) -> None:
        self.now = 0.0
        self.delays: list[float] = []
        self._ticks: asyncio.Queue[None] = asyncio.Queue()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        await self._ticks.get()
        self.now += seconds

    async def tick(self) -> None:
        """Let one sleep end and wait until the sweep after it ran (the sweeper sleeps again)."""
        sleeps = len(self.delays)
        self._ticks.put_nowait(None)
        while len(self.delays) == sleeps:
            await asyncio.sleep(0)


def test_service_starts_http_gateway_and_sweeps_engines(make_core, monkeypatch) -> None:
    clock = SweepClock()
    core = make_core(registry=EngineRegistry(0.02, clock), heartbeat_interval_ms=10, engine_timeout_ms=20)
    runner, calls = FakeRunner(), []

    async def start_http(core_arg, host, port, keys, max_body_bytes, limits, *, router=None):
        assert limits == config.http
        assert router is None  # one scheduler: no session routing
        calls.append((core_arg, host, port, keys.enabled, max_body_bytes))
        return runner

    monkeypatch.setattr(service_module, "_http_gateway", lambda: start_http)
    config = SchedulerConfig(http_port=8123, heartbeat_interval_ms=10, engine_timeout_ms=20)
    service = SchedulerService(config, core, sleep=clock.sleep)
    engine_ids = ["p0", "d0", "d1"]

    async def go() -> list[list[bool]]:
        await service.start()
        registered = []
        for _ in range(3):  # registrations 10, 20, 30 ms old at each sweep; the timeout is 20 ms
            await clock.tick()
            registered.append([core.registry.get(e) is not None for e in engine_ids])
        await service.stop()
        return registered

    assert run(go()) == [[True] * 3, [True] * 3, [False] * 3]
    assert clock.delays == [0.01] * 4
    assert calls == [(core, "0.0.0.0", 8123, False, 4 << 20)] and runner.cleaned
    assert ServerSettings.of("scheduler", service.config).grpc_port == 50051


def test_service_without_gateway_serves_grpc_only(make_core, monkeypatch) -> None:
    monkeypatch.setattr(service_module, "_http_gateway", lambda: None)
    service = SchedulerService(SchedulerConfig(), make_core())

    async def go():
        await service.start()
        await service.stop()

    run(go())


def test_missing_gateway_module_is_detected(monkeypatch) -> None:
    monkeypatch.setattr(service_module, "HTTP_GATEWAY_MODULE", "agentserve.scheduler.http.app")
    monkeypatch.setattr(service_module.importlib, "import_module", _raise_missing)
    assert service_module._http_gateway() is None


def _raise_missing(name: str):
    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
