"""`agentserve up --local`: the fabric profile reaches the engines, the path policy the scheduler."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agentserve.cli.main import main
from agentserve.cli.up import drain_hint, ready_line
from agentserve.cluster import ports as cluster_ports
from agentserve.cluster.commands import service_commands
from agentserve.cluster.local import LocalCluster, drained
from agentserve.cluster.ports import LocalPorts
from agentserve.cluster.process import Proc
from agentserve.cluster.settings import FabricSettings
from agentserve.engine.model_catalog import ServedModel

pytestmark = pytest.mark.unit

MODEL = ServedModel("m-instruct", Path("/m"))


@pytest.fixture(autouse=True)
def ports_from_a_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    """`free_port` binds a socket to ask the kernel; here free ports come from a counter, distinct as
    the kernel's are."""
    ports = iter(range(40000, 41000))
    monkeypatch.setattr(cluster_ports, "free_port", lambda host="127.0.0.1": next(ports))


def flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_profile_and_policy_reach_the_services() -> None:
    fabric = FabricSettings(profile="h800-node", kv_path_policy="always-b", prefill_tokens_per_s=800.0)
    commands = {name: cmd for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 2, fabric)}
    for engine in ("prefill", "decode-0", "decode-1"):
        assert flag(commands[engine], "--fabric-profile") == "h800-node"
        assert float(flag(commands[engine], "--fabric-prefill-tokens-per-s")) == 800.0
    assert flag(commands["scheduler"], "--kv-path-policy") == "always-b"
    assert "--fabric-profile" not in commands["kvstore"]


def test_the_model_and_its_name_reach_the_scheduler_and_every_engine() -> None:
    commands = {name: cmd for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 2)}
    for service in ("scheduler", "prefill", "decode-0", "decode-1"):
        assert (flag(commands[service], "--model-dir"), flag(commands[service], "--model-name")) == ("/m", "m-instruct")
    assert "--model-dir" not in commands["kvstore"] and "--model-dir" not in commands["toolproxy"]


def test_the_cluster_serves_the_tiny_model_unless_given_one(tmp_path: Path) -> None:
    from agentserve.engine.default_model import ensure_default_model
    from agentserve.engine.model_catalog import SMOLLM2_FILE

    assert LocalCluster().served_model() == ServedModel("agentserve-tiny", ensure_default_model())
    gguf = tmp_path / SMOLLM2_FILE
    gguf.write_bytes(b"GGUF")
    assert LocalCluster(model_dir=gguf).served_model() == ServedModel("SmolLM2-135M-Instruct", gguf)
    assert LocalCluster(model_dir=gguf, model_name="smol").served_model() == ServedModel("smol", gguf)


def test_unknown_profile_or_policy_fails_before_anything_starts(capsys) -> None:
    with pytest.raises(ValueError, match="available: dualpath-h800, h800-node, local-unshaped"):
        LocalCluster(fabric=FabricSettings(profile="dgx-moon"))
    policies = "dualpath, always-a, always-b, split"
    with pytest.raises(ValueError, match=f"kv_path_policy must be one of {policies}, got 'fastest'"):
        LocalCluster(fabric=FabricSettings(kv_path_policy="fastest"))
    assert main(["up", "--local", "--profile", "dgx-moon"]) == 2
    assert "no hardware profile 'dgx-moon'" in capsys.readouterr().err


def test_ready_line_lists_every_endpoint() -> None:
    ports = LocalPorts()
    assert ready_line(ports, {}) == (
        "agentserve: ready. OpenAI http://127.0.0.1:8000/v1 | gRPC 127.0.0.1:50051 | "
        "tools http://127.0.0.1:8080/tools/<name> | metrics http://127.0.0.1:9100/metrics | "
        "loopback only, no API keys (set AGENTSERVE_API_KEYS to authenticate clients) | "
        "tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "AGENTSERVE_TRACING_UI": "http://h:6006"}
    assert ready_line(ports, env).endswith("| traces to http://127.0.0.1:4317 (UI http://h:6006)")
    commands = {name: cmd for name, _, cmd in service_commands(ports, MODEL, Path("/d"), 1)}
    assert flag(commands["scheduler"], "--metrics-port") == "9100"
    assert flag(commands["scheduler"], "--session-db") == "/d-sessions/sessions.sqlite3"  # beside the kvstore's


def test_several_prefill_engines_get_distinct_ports_and_names() -> None:
    ports = LocalPorts().with_prefill(3)
    assert ports.prefill_ports[0] == 50053 and len(set(ports.prefill_ports)) == 3
    assert not {50051, 50052, 50054, 50055, 8000, 8080, 9100} & set(ports.prefill_ports[1:])
    commands = {name: (port, cmd) for name, port, cmd in service_commands(ports, MODEL, Path("/d"), 2, prefill=3)}
    assert [n for n in commands if n.startswith("prefill")] == ["prefill-0", "prefill-1", "prefill-2"]
    for i in range(3):
        port, cmd = commands[f"prefill-{i}"]
        assert port == ports.prefill_ports[i] and flag(cmd, "--grpc-port") == str(port)
        assert cmd[cmd.index("-m") + 1] == "agentserve.prefill"
    single = [name for name, _, _ in service_commands(LocalPorts(), MODEL, Path("/d"), 2)]
    assert single == ["kvstore", "scheduler", "prefill", "decode-0", "decode-1", "toolproxy"]
    free = LocalPorts.free(1, prefill=2)
    assert free.prefill == free.prefill_ports[0] != free.prefill_ports[1]


def test_prefill_count_is_validated() -> None:
    with pytest.raises(ValueError, match="at least one prefill engine is required, got prefill=0"):
        LocalCluster(prefill=0)
    assert main(["up", "--local", "--prefill", "0"]) == 2


def test_every_service_listens_on_loopback_unless_keys_open_the_client_endpoints() -> None:
    commands = {name: cmd for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 1)}
    assert {name: flag(cmd, "--host") for name, cmd in commands.items()} == dict.fromkeys(commands, "127.0.0.1")
    opened = {
        name: flag(cmd, "--host")
        for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 1, listen_host="0.0.0.0")
    }
    assert opened == {**dict.fromkeys(commands, "127.0.0.1"), "scheduler": "0.0.0.0", "toolproxy": "0.0.0.0"}
    with pytest.raises(ValueError, match="listening on 0.0.0.0 needs API keys"):
        LocalCluster(listen_host="0.0.0.0", env={"AGENTSERVE_API_KEYS": ""})
    keys = {"AGENTSERVE_API_KEYS": "acme:as-local-test-key-0123456789"}
    LocalCluster(listen_host="0.0.0.0", env=keys)
    assert ready_line(LocalPorts(), keys, "0.0.0.0").startswith(
        "agentserve: ready. OpenAI http://127.0.0.1:8000/v1 | gRPC 127.0.0.1:50051 | "
    )
    assert "| API keys: 1 tenants |" in ready_line(LocalPorts(), keys, "0.0.0.0")
    with pytest.raises(ValueError, match="AGENTSERVE_API_KEYS, entry 1"):
        LocalCluster(env={"AGENTSERVE_API_KEYS": "acme:short"})


def test_emulated_compute_reaches_every_engine_and_nothing_else() -> None:
    from agentserve.cluster.settings import ComputeSettings
    from agentserve.common.config import load_config
    from agentserve.engine.emulation_config import EmulationConfig
    from agentserve.prefill.config import PrefillConfig

    emulation = EmulationConfig("qwen2.5-32b", "h200", time_dilation=20.0, kv_materialise_bytes=0, prefill_mfu=0.3)
    compute = ComputeSettings("emulated", emulation)
    commands = {
        name: cmd
        for name, _, cmd in service_commands(
            LocalPorts().with_prefill(2), MODEL, Path("/d"), 2, prefill=2, compute=compute
        )
    }
    for engine in ("prefill-0", "prefill-1", "decode-0", "decode-1"):
        cmd = commands[engine]
        assert (flag(cmd, "--compute"), flag(cmd, "--target-model"), flag(cmd, "--target-gpu")) == (
            "emulated",
            "qwen2.5-32b",
            "h200",
        )
        assert (float(flag(cmd, "--time-dilation")), flag(cmd, "--kv-materialise-bytes")) == (20.0, "0")
        engine_flags = compute.engine_args()
        assert engine_flags == cmd[len(cmd) - len(engine_flags) :]
        assert load_config(PrefillConfig, engine_flags, env={}).emulation == emulation  # every setting arrives
    assert all("--compute" not in commands[name] for name in ("kvstore", "scheduler", "toolproxy"))
    real = {name: cmd for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 1)}
    assert "--compute" not in real["prefill"]  # real compute: the engines' own default


def test_bad_emulated_compute_fails_before_anything_starts(capsys) -> None:
    from agentserve.cluster.settings import ComputeSettings
    from agentserve.engine.emulation_config import EmulationConfig

    with pytest.raises(ValueError, match="unknown target model 'gpt-9'"):
        ComputeSettings("emulated", EmulationConfig("gpt-9"))
    with pytest.raises(ValueError, match="compute must be one of real, emulated"):
        ComputeSettings("simulated")
    assert main(["up", "--local", "--compute", "emulated", "--time-dilation", "0"]) == 2
    assert "time_dilation must be positive" in capsys.readouterr().err


def test_the_drain_hint_names_the_internal_port_and_the_operator_certificate() -> None:
    ports = LocalPorts(scheduler_internal=50161)
    assert "agentserve drain ENGINE --scheduler 127.0.0.1:50161 --tls-dir /d-certs/operator`" in drain_hint(
        ports, Path("/d-certs")
    )
    assert "--scheduler 127.0.0.1:50161 --plain`" in drain_hint(ports, None)


@pytest.mark.parametrize(
    "name, code, stays_down",
    [
        ("decode-1", 0, True),
        ("prefill", 0, True),
        ("decode-1", -9, False),
        ("decode-1", 1, False),
        ("kvstore", 0, False),
    ],
)
def test_only_an_engine_that_exited_0_counts_as_drained(name, code, stays_down) -> None:
    popen = SimpleNamespace(returncode=code)
    assert drained(Proc(name, 1, popen)) is stays_down  # a Popen stand-in: drained() reads only returncode


def test_several_schedulers_share_etcd_behind_haproxy_on_the_clients_and_engines_ports() -> None:
    from agentserve.cluster.balancer import haproxy_config
    from agentserve.cluster.settings import ControlSettings

    control = ControlSettings(schedulers=2)
    ports = LocalPorts().with_schedulers(2)
    commands = {
        name: (port, cmd)
        for name, port, cmd in service_commands(ports, MODEL, Path("/d"), 1, certs=Path("/c"), control=control)
    }
    assert list(commands) == [
        "etcd",
        "kvstore",
        "scheduler-0",
        "scheduler-1",
        "haproxy",
        "prefill",
        "decode-0",
        "toolproxy",
    ]
    assert commands["haproxy"][0] == ports.scheduler == 50051  # the balancer keeps the clients' port
    for i in range(2):
        port, cmd = commands[f"scheduler-{i}"]
        own = ports.scheduler_instance(i)
        assert port == own.grpc and flag(cmd, "--http-port") == str(own.http)
        assert {own.grpc, own.http, own.internal} & {50051, 8000, 50061} == set()
        assert (flag(cmd, "--state"), flag(cmd, "--etcd-endpoints"), flag(cmd, "--scheduler-id")) == (
            "etcd",
            "127.0.0.1:2379",
            f"scheduler-{i}",
        )
        assert "--session-db" not in cmd and flag(cmd, "--internal-tls-dir") == "/c/scheduler"
    assert flag(commands["scheduler-0"][1], "--metrics-port") == "9100"  # the one `up --local` prints
    for name in ("prefill", "decode-0", "toolproxy"):
        assert flag(commands[name][1], "--scheduler-address") == "127.0.0.1:50061"  # HAProxy's internal port
    for name in ("etcd", "haproxy"):  # not on the internal plane: no certificate, tied to `up` by a shim
        cmd = commands[name][1]
        assert "--internal-tls-dir" not in cmd and cmd[cmd.index("-m") + 1] == "agentserve.cluster.tied"
    config = haproxy_config(ports, 2)
    for i in range(2):
        own = ports.scheduler_instance(i)
        for port in (own.grpc, own.http, own.internal):
            assert f"127.0.0.1:{port}" in config
    assert "bind 127.0.0.1:50051 proto h2" in config and "bind 127.0.0.1:8000" in config


def test_one_scheduler_may_keep_its_state_in_etcd_and_several_must() -> None:
    from agentserve.cluster.settings import ControlSettings

    alone = {name: cmd for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 1)}
    assert "--state" not in alone["scheduler"] and "etcd" not in alone
    shared = {
        name: cmd
        for name, _, cmd in service_commands(LocalPorts(), MODEL, Path("/d"), 1, control=ControlSettings(state="etcd"))
    }
    assert list(shared)[:3] == ["etcd", "kvstore", "scheduler"] and "haproxy" not in shared
    assert flag(shared["scheduler"], "--grpc-port") == "50051" and flag(shared["scheduler"], "--state") == "etcd"
    with pytest.raises(ValueError, match="state sqlite is one scheduler's"):
        ControlSettings(schedulers=2, state="sqlite")
    with pytest.raises(ValueError, match="at least one scheduler"):
        ControlSettings(schedulers=0)
    assert main(["up", "--local", "--schedulers", "2", "--state", "sqlite"]) == 2
