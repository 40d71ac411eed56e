"""The command line of every service of a local cluster, in start order, and where each keeps its
files (the kvstore's data, the scheduler's sessions, the internal plane's certificates, etcd's data
and HAProxy's configuration when the control plane has them)."""

from __future__ import annotations

import sys
from pathlib import Path

from agentserve.cluster.ports import LOOPBACK, LocalPorts
from agentserve.cluster.settings import ComputeSettings, ControlSettings, FabricSettings
from agentserve.engine.model_catalog import ServedModel


def cert_root(data_dir: Path) -> Path:
    """Where `up --local` keeps the internal plane's CA and certificates: beside the kvstore's data."""
    return data_dir.with_name(f"{data_dir.name}-certs")


def cert_role(name: str) -> str:
    """The certificate a service presents: one per role (decode-1 presents decode's)."""
    return name.split("-", 1)[0]


# Not agentserve's services: no internal-plane certificate, and tied to `up` by `cluster.tied`.
INFRASTRUCTURE = ("etcd", "haproxy")


def etcd_dir(data_dir: Path) -> Path:
    """Where the cluster's etcd keeps its data: beside the kvstore's."""
    return data_dir.with_name(f"{data_dir.name}-etcd")


def balancer_config(data_dir: Path) -> Path:
    """Where `up --local` writes HAProxy's configuration (`cluster/balancer.py`)."""
    return data_dir.with_name(f"{data_dir.name}-haproxy") / "haproxy.cfg"


def scheduler_name(index: int, count: int) -> str:
    """`scheduler` when it is the only one, else scheduler-0 .. scheduler-<count-1>."""
    return "scheduler" if count == 1 else f"scheduler-{index}"


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
    control: ControlSettings = ControlSettings(),
) -> list[tuple[str, int, list[str]]]:
    """(name, gRPC port, command) of every service, in start order. Internal services listen on
    loopback; the scheduler and the tool proxy on `listen_host`. With `certs` (what `ensure_certs`
    made), each service's internal plane runs mutual TLS with its role's certificate. `control`
    adds etcd (first) and, with several schedulers, HAProxy (after them) on the clients' ports."""
    cmds = _service_commands(ports, model, data_dir, decoders, fabric, prefill, compute, listen_host, control)
    if certs is None:
        return cmds
    return [
        (name, port, cmd if name in INFRASTRUCTURE else [*cmd, "--internal-tls-dir", str(certs / cert_role(name))])
        for name, port, cmd in cmds
    ]


def _service_commands(  # noqa: PLR0913 - the cluster's layout and its typed settings
    ports: LocalPorts,
    model: ServedModel,
    data_dir: Path,
    decoders: int,
    fabric: FabricSettings,
    prefill: int,
    compute: ComputeSettings,
    listen_host: str,
    control: ControlSettings,
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
    cmds = []
    if control.shared:
        cmds.append(("etcd", ports.etcd, py + ["agentserve.cluster.tied", *etcd_command(ports, data_dir)]))
    cmds += [
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
    ]
    for i in range(control.schedulers):
        cmds.append(_scheduler_command(py, ports, i, model, data_dir, fabric, listen_host, control))
    if control.balanced:
        haproxy = ["agentserve.cluster.tied", "haproxy", "-db", "-f", str(balancer_config(data_dir))]
        cmds.append(("haproxy", ports.scheduler, py + haproxy))
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


def _scheduler_command(
    py: list[str],
    ports: LocalPorts,
    index: int,
    model: ServedModel,
    data_dir: Path,
    fabric: FabricSettings,
    listen_host: str,
    control: ControlSettings,
) -> tuple[str, int, list[str]]:
    """Scheduler `index`: on the clients' ports when it is the only one, else on its own, loopback
    (the balancer faces the clients); its sessions in SQLite, or every scheduler's in etcd."""
    own = ports.scheduler_instance(index)
    name = scheduler_name(index, control.schedulers)
    if control.shared:
        state = [
            "--state",
            "etcd",
            "--etcd-endpoints",
            f"127.0.0.1:{ports.etcd}",
            "--scheduler-id",
            name,
            "--advertise-host",
            "127.0.0.1",
        ]
    else:
        state = ["--session-db", str(session_db(data_dir))]
    cmd = py + [
        "agentserve.scheduler",
        "--host",
        LOOPBACK if control.balanced else listen_host,
        "--grpc-port",
        str(own.grpc),
        "--internal-port",
        str(own.internal),
        "--internal-host",
        LOOPBACK,
        "--http-port",
        str(own.http),
        "--metrics-port",
        str(own.metrics),
        "--model-dir",
        str(model.source),
        "--model-name",
        model.name,
        "--kvstore-address",
        f"127.0.0.1:{ports.kvstore}",
        "--kv-path-policy",
        fabric.kv_path_policy,
        *state,
    ]
    return name, own.grpc, cmd


def etcd_command(ports: LocalPorts, data_dir: Path) -> list[str]:
    """A one-member etcd on loopback, its data beside the kvstore's."""
    client, peer = f"http://127.0.0.1:{ports.etcd}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        "etcd",
        "--name",
        "agentserve",
        "--data-dir",
        str(etcd_dir(data_dir)),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"agentserve={peer}",
    ]
