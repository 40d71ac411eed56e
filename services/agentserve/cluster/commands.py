"""The command line of every service of a local cluster, in start order, and where each keeps its
files (the kvstore's data, the scheduler's sessions, the internal plane's certificates)."""

from __future__ import annotations

import sys
from pathlib import Path

from agentserve.cluster.ports import LOOPBACK, LocalPorts
from agentserve.cluster.settings import ComputeSettings, FabricSettings
from agentserve.engine.model_catalog import ServedModel


def cert_root(data_dir: Path) -> Path:
    """Where `up --local` keeps the internal plane's CA and certificates: beside the kvstore's data."""
    return data_dir.with_name(f"{data_dir.name}-certs")


def cert_role(name: str) -> str:
    """The certificate a service presents: one per role (decode-1 presents decode's)."""
    return name.split("-", 1)[0]


def session_db(data_dir: Path) -> Path:
    """Where the scheduler writes its sessions (durable: a restarted scheduler resumes them): beside
    the kvstore's data, not in it."""
    return data_dir.with_name(f"{data_dir.name}-sessions") / "sessions.sqlite3"


def service_commands(  # noqa: PLR0913 - the cluster's layout and its typed fabric and compute settings
    ports: LocalPorts,
    model: ServedModel,
    data_dir: Path,
    decoders: int,
    fabric: FabricSettings = FabricSettings(),
    prefill: int = 1,
    compute: ComputeSettings = ComputeSettings(),
    listen_host: str = LOOPBACK,
    certs: Path | None = None,
) -> list[tuple[str, int, list[str]]]:
    """(name, gRPC port, command) of every service, in start order. Internal services listen on
    loopback; the scheduler and the tool proxy on `listen_host`. With `certs` (what `ensure_certs`
    made), each service's internal plane runs mutual TLS with its role's certificate."""
    cmds = _service_commands(ports, model, data_dir, decoders, fabric, prefill, compute, listen_host)
    if certs is None:
        return cmds
    return [(name, port, [*cmd, "--internal-tls-dir", str(certs / cert_role(name))]) for name, port, cmd in cmds]


def _service_commands(
    ports: LocalPorts,
    model: ServedModel,
    data_dir: Path,
    decoders: int,
    fabric: FabricSettings,
    prefill: int,
    compute: ComputeSettings,
    listen_host: str,
) -> list[tuple[str, int, list[str]]]:
    py = [sys.executable, "-m"]
    engine_common = [
        "--host",
        LOOPBACK,
        "--model-dir",
        str(model.source),
        "--model-name",
        model.name,
        "--advertise-host",
        "127.0.0.1",
        "--scheduler-address",
        f"127.0.0.1:{ports.scheduler_internal}",
        "--kvstore-address",
        f"127.0.0.1:{ports.kvstore}",
        "--fabric-profile",
        fabric.profile,
        "--fabric-prefill-tokens-per-s",
        repr(fabric.prefill_tokens_per_s),
        *compute.engine_args(),
    ]
    cmds = [
        (
            "kvstore",
            ports.kvstore,
            py
            + [
                "agentserve.kvstore",
                "--host",
                LOOPBACK,
                "--grpc-port",
                str(ports.kvstore),
                "--data-dir",
                str(data_dir),
            ],
        ),
        (
            "scheduler",
            ports.scheduler,
            py
            + [
                "agentserve.scheduler",
                "--host",
                listen_host,
                "--grpc-port",
                str(ports.scheduler),
                "--internal-port",
                str(ports.scheduler_internal),
                "--internal-host",
                LOOPBACK,
                "--http-port",
                str(ports.http),
                "--metrics-port",
                str(ports.metrics),
                "--model-dir",
                str(model.source),
                "--model-name",
                model.name,
                "--kvstore-address",
                f"127.0.0.1:{ports.kvstore}",
                "--kv-path-policy",
                fabric.kv_path_policy,
                "--session-db",
                str(session_db(data_dir)),
            ],
        ),
    ]
    prefill_snics = fabric.snic_groups("prefill", prefill, ports.scheduler)
    for i in range(prefill):
        name = "prefill" if prefill == 1 else f"prefill-{i}"
        port = ports.prefill_port(i)
        cmds.append(
            (name, port, py + ["agentserve.prefill", "--grpc-port", str(port)] + engine_common + prefill_snics[i])
        )
    decode_snics = fabric.snic_groups("decode", decoders, ports.scheduler)
    for i in range(decoders):
        port = ports.decode_ports[i] if ports.decode_ports else ports.decode_base + i
        cmds.append(
            (
                f"decode-{i}",
                port,
                py + ["agentserve.decode", "--grpc-port", str(port)] + engine_common + decode_snics[i],
            )
        )
    cmds.append(
        (
            "toolproxy",
            ports.toolproxy_grpc,
            py
            + [
                "agentserve.toolproxy",
                "--host",
                listen_host,
                "--grpc-port",
                str(ports.toolproxy_grpc),
                "--http-port",
                str(ports.toolproxy_http),
                "--scheduler-address",
                f"127.0.0.1:{ports.scheduler_internal}",
            ],
        )
    )
    return cmds
