"""`agentserve up --local`: every service as a local process on loopback.

Starts them in dependency order (kvstore, scheduler, engines, toolproxy), waits for each to report
SERVING over gRPC health and for the scheduler's HTTP `/health` to say a prefill and a decode
engine have registered, then supervises: a service that exits is restarted with backoff
(`restarts.RestartPolicy`); on Ctrl-C / SIGTERM / SIGHUP, at any phase, all are stopped. Children
run in their own process group and die with this process even when it is SIGKILLed
(`children.spawn`). With several prefill engines (`--prefill N`) they are named prefill-0 ..
prefill-N-1; the first listens on the prefill port, the others on free ports. With `--compute
emulated` the engines run no model: each takes the target model's time on the target GPU from the
cost model (a dozen fit on two cores; `ComputeSettings`).

Every service listens on loopback. Only the clients' endpoints (the scheduler's gRPC and HTTP, the
tool proxy's HTTP) may listen elsewhere (`listen_host`), and only with API keys configured.

The internal plane (engines, the store, the scheduler's internal port, the tool proxy's gRPC) runs
mutual TLS by default: certificates are issued at the first start into `<data_dir>-certs`
(`common/certs.py`, reused after) and each service gets its own directory; `internal_tls=False`
(`up --local --plain-internal`) runs it plain.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.cli.children import spawn
from agentserve.cli.restarts import RestartPolicy, RestartState
from agentserve.common.api_keys import ApiKeys
from agentserve.common.certs import ensure_certs
from agentserve.common.config import check_choice
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.netutil import free_port
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.emulation_config import ComputeMode, EmulationConfig
from agentserve.model_files.tokenizer_files import models_home

LOOPBACK = "127.0.0.1"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class LocalPorts:
    scheduler: int = 50051
    http: int = 8000
    kvstore: int = 50052
    prefill: int = 50053
    decode_base: int = 50054
    decode_ports: tuple[int, ...] = ()  # explicit ports (tests); default decode_base + i
    metrics: int = 9100  # the scheduler's Prometheus /metrics
    prefill_ports: tuple[int, ...] = ()  # every prefill engine's, when there are several
    scheduler_internal: int = 50061  # engines' registration, the tool proxy's events

    @classmethod
    def free(cls, decoders: int, prefill: int = 1) -> LocalPorts:
        """Distinct free loopback ports for every service (tests, benches beside other work)."""
        prefill_ports = tuple(free_port() for _ in range(prefill))
        return cls(
            scheduler=free_port(),
            scheduler_internal=free_port(),
            http=free_port(),
            kvstore=free_port(),
            prefill=prefill_ports[0],
            prefill_ports=prefill_ports if prefill > 1 else (),
            decode_ports=tuple(free_port() for _ in range(decoders)),
            toolproxy_grpc=free_port(),
            toolproxy_http=free_port(),
            metrics=free_port(),
        )

    toolproxy_grpc: int = 50050
    toolproxy_http: int = 8080

    def with_prefill(self, count: int) -> LocalPorts:
        """These ports with one for each of `count` prefill engines: the prefill port first, free
        ports for the rest (fixed ones would collide with the decode ports that follow 50053)."""
        if count <= max(1, len(self.prefill_ports)):
            return self
        have = self.prefill_ports or (self.prefill,)
        return replace(self, prefill_ports=have + tuple(free_port() for _ in range(count - len(have))))

    def prefill_port(self, index: int) -> int:
        if self.prefill_ports:
            return self.prefill_ports[index]
        if index == 0:
            return self.prefill
        raise ValueError(f"no port for prefill engine {index}; use LocalPorts.with_prefill")


@dataclass
class Proc:
    name: str
    grpc_port: int
    popen: subprocess.Popen
    cmd: list[str] = field(default_factory=list)
    tls: InternalTLS | None = None  # what probing `grpc_port` presents: it is on the internal plane
    restarts: RestartState = field(default_factory=RestartState)
    restart_at: float | None = None  # when a dead one is due to start again


class Stopped(Exception):
    """A stop signal arrived while `up --local` was starting or supervising its services."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def keys_of(env: Mapping[str, str]) -> ApiKeys:
    """The API keys the services will load from this environment (ValueError if malformed)."""
    return ApiKeys.load(env.get("AGENTSERVE_API_KEYS", ""), env.get("AGENTSERVE_API_KEYS_FILE", ""))


def health_channel(port: int, tls: InternalTLS | None = None) -> grpc.Channel:
    """A blocking channel to a local port, with the internal plane's credentials when it is on it."""
    target = f"127.0.0.1:{port}"
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.channel_credentials(), options=tls.channel_options())


def wait_serving(proc: Proc, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    with health_channel(proc.grpc_port, proc.tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc.popen.poll() is not None:
                raise RuntimeError(f"{proc.name} exited with code {proc.popen.returncode}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    raise TimeoutError(f"{proc.name} did not become SERVING within {timeout_s:.0f}s")


def http_health(port: int) -> tuple[int, dict]:
    """(status, JSON body) of the scheduler's `/health`; status 0 if it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return 0, {}


def wait_ready(proc: Proc, http_port: int, timeout_s: float) -> None:
    """Until the scheduler's `/health` is 200: a prefill and a decode engine registered."""
    deadline = time.monotonic() + timeout_s
    body: dict = {}
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited with code {proc.popen.returncode}")
        status, body = http_health(http_port)
        if status == 200:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the scheduler was not ready within {timeout_s:.0f}s: {body.get('message', 'no answer')}")


def ready_line(ports: LocalPorts, env: Mapping[str, str], listen_host: str = LOOPBACK) -> str:
    """The one line `up --local` prints once everything serves: where each endpoint is, and who
    can reach it."""
    otlp = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    tracing = (
        f"traces to {otlp} (UI {env.get('AGENTSERVE_TRACING_UI', 'http://127.0.0.1:6006')})"
        if otlp
        else "tracing off (set OTEL_EXPORTER_OTLP_ENDPOINT)"
    )
    keys = keys_of(env)
    access = (
        f"API keys: {len(keys.tenants)} tenants"
        if keys.enabled
        else "loopback only, no API keys (set AGENTSERVE_API_KEYS to authenticate clients)"
    )
    host = LOOPBACK if listen_host in ("0.0.0.0", "::") else listen_host
    return (
        f"agentserve: ready. OpenAI http://{host}:{ports.http}/v1 | gRPC {host}:{ports.scheduler} | "
        f"tools http://{host}:{ports.toolproxy_http}/tools/<name> | "
        f"metrics http://127.0.0.1:{ports.metrics}/metrics | {access} | {tracing}"
    )


@dataclass(frozen=True)
class FabricSettings:
    """The emulated fabric of a local cluster: engines' hardware profile, the scheduler's path policy."""

    profile: str = "local-unshaped"  # profiles/<name>.yaml, or a path to one
    kv_path_policy: str = "dualpath"  # dualpath, always-a, always-b
    prefill_tokens_per_s: float = 0.0  # what the profile is scaled against; 0 = each engine measures
    # One storage-NIC bucket per node shared by its engines (the profile's node: `gpus` engines of a
    # role each), worth their static shares together; off: each engine its static share alone.
    shared_snic: bool = False

    def snic_groups(self, role: str, count: int, cluster_key: int) -> list[list[str]]:
        """Per engine of `role` (of `count`), the flags naming its node's shared SNIC bucket."""
        if not self.shared_snic:
            return [[] for _ in range(count)]
        from agentserve.fabric.profiles import load_profile

        node = load_profile(self.profile).node
        if node is None:
            raise ValueError(f"shared_snic needs a profile with a node topology; {self.profile} has none")
        flags = []
        for i in range(count):
            first = i // node.gpus * node.gpus
            engines = min(node.gpus, count - first)
            path = snic_bucket_dir() / f"agentserve-snic-{cluster_key}-{role}-node{i // node.gpus}"
            flags.append(["--snic-group", str(path), "--snic-group-engines", str(engines)])
        return flags


def snic_bucket_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class ComputeSettings:
    """Whether engines run the model (`real`) or emulate the target model on the target GPU
    (`emulated`: no weights loaded; `emulation` says what they emulate, see EmulationConfig)."""

    mode: ComputeMode = "real"
    emulation: EmulationConfig = field(default_factory=EmulationConfig)

    def __post_init__(self) -> None:
        check_choice("compute", self.mode, ComputeMode)

    def engine_args(self) -> list[str]:
        """The engine flags (`EngineServiceConfig.compute` and its emulation's) that say this."""
        if self.mode == "real":
            return []
        emulation = [
            text
            for f in fields(EmulationConfig)
            for text in (f"--{f.name.replace('_', '-')}", _flag_text(getattr(self.emulation, f.name)))
        ]
        # An emulated engine's torch work is a few tiny tensors a step: one thread, no pool.
        return ["--compute", "emulated", *emulation, "--num-threads", "1"]


def _flag_text(value: object) -> str:
    """A setting as its flag's text: floats by repr, so they travel exactly."""
    return repr(value) if isinstance(value, float) else str(value)


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


def service_commands(
    ports: LocalPorts,
    model_dir: Path,
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
    cmds = _service_commands(ports, model_dir, data_dir, decoders, fabric, prefill, compute, listen_host)
    if certs is None:
        return cmds
    return [(name, port, [*cmd, "--internal-tls-dir", str(certs / cert_role(name))]) for name, port, cmd in cmds]


def _service_commands(
    ports: LocalPorts,
    model_dir: Path,
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
        str(model_dir),
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
                str(model_dir),
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


class LocalCluster:
    def __init__(
        self,
        ports: LocalPorts = LocalPorts(),
        decoders: int = 2,
        prefill: int = 1,
        data_dir: Path | None = None,
        log_dir: Path | None = None,
        model_dir: Path | None = None,
        env: dict[str, str] | None = None,
        fabric: FabricSettings = FabricSettings(),
        compute: ComputeSettings = ComputeSettings(),
        listen_host: str = LOOPBACK,
        restart_policy: RestartPolicy = RestartPolicy(),
        internal_tls: bool = True,
    ):
        if decoders < 1:
            raise ValueError(f"at least one decode engine is required, got decoders={decoders}")
        if prefill < 1:
            raise ValueError(f"at least one prefill engine is required, got prefill={prefill}")
        from agentserve.fabric.profiles import load_profile
        from agentserve.scheduler.paths import make_path_policy

        load_profile(fabric.profile)  # a bad name fails here, naming the profiles on offer
        make_path_policy(fabric.kv_path_policy)
        self.ports = ports.with_prefill(prefill)
        self.prefill = prefill
        self.decoders = decoders
        self.fabric = fabric
        self.compute = compute
        home = models_home().parent
        self.data_dir = data_dir or home / "kvstore-local"
        self.log_dir = log_dir or home / "logs"
        self.model_dir = model_dir
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        keys = keys_of(self.env)  # malformed keys fail here, before anything starts
        if listen_host not in (LOOPBACK, "localhost", "::1") and not keys.enabled:
            raise ValueError(
                f"listening on {listen_host} needs API keys (AGENTSERVE_API_KEYS or AGENTSERVE_API_KEYS_FILE); "
                "without them the services listen on loopback only"
            )
        self.listen_host = listen_host
        self.restart_policy = restart_policy
        self.certs = cert_root(self.data_dir) if internal_tls else None
        self.procs: list[Proc] = []

    def start(self, timeout_s: float = 180.0, before: str | None = None) -> None:
        """Start the services not started yet, in order, and wait until the cluster is ready.

        With `before`, stop short of the service of that name, or of that group (`prefill` stops
        before prefill-0), and skip the readiness wait: a later `start()` starts the rest. Tests
        use it to watch a scheduler that has no engines.
        """
        model_dir = self.model_dir or ensure_default_model()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = {p.name for p in self.procs}
        if not started:
            self._remove_snic_buckets()  # a bucket left by an earlier cluster on these ports is stale
        if self.certs is not None:
            ensure_certs(self.certs)  # the first start issues them; later ones reuse what is valid
        try:
            commands = service_commands(
                self.ports,
                model_dir,
                self.data_dir,
                self.decoders,
                self.fabric,
                prefill=self.prefill,
                compute=self.compute,
                listen_host=self.listen_host,
                certs=self.certs,
            )
            for name, port, cmd in commands:
                if before is not None and (name == before or name.startswith(f"{before}-")):
                    break
                if name in started:
                    continue
                cmd = [*cmd, *self.extra_args(name)]
                probe = None if name == "scheduler" else self.internal_client()  # its grpc_port faces clients
                proc = Proc(name, port, self._spawn(name, cmd, "w"), cmd, probe, RestartState(self.restart_policy))
                proc.restarts.started(time.monotonic())
                self.procs.append(proc)
                # Engines warm up in parallel; the rest must be up before their dependants start.
                if not name.startswith(("prefill", "decode")):
                    wait_serving(proc, timeout_s)
            for proc in self.procs:
                wait_serving(proc, timeout_s)
            if before is None:
                scheduler = next(p for p in self.procs if p.name == "scheduler")
                wait_ready(scheduler, self.ports.http, timeout_s)
        except BaseException:
            self.stop()
            raise

    def respawn(self, name: str, timeout_s: float = 180.0) -> Proc:
        """Start service `name` again (after it died) and wait until it serves (tests kill one)."""
        proc = next(p for p in self.procs if p.name == name)
        if proc.popen.poll() is None:
            raise ValueError(f"{name} is still running (pid {proc.popen.pid})")
        proc.popen = self._spawn(name, proc.cmd, "a")
        proc.restarts.started(time.monotonic())
        wait_serving(proc, timeout_s)
        if name == "scheduler":
            wait_ready(proc, self.ports.http, timeout_s)
        return proc

    def internal_client(self, role: str = "client") -> InternalTLS | None:
        """The credentials a caller from outside the services (this process, tests) presents on
        the internal plane: the `client` certificate (health, stats, lookups), or a service's to
        call as that service would (`internal_roles.py` says who may call what); None when the
        plane is plain."""
        return None if self.certs is None else InternalTLS.load(str(self.certs / role))

    def internal_channel(self, port: int) -> grpc.Channel:
        """A blocking channel to the internal port `port` of this cluster, as a deployment peer."""
        return health_channel(port, self.internal_client())

    def _spawn(self, name: str, cmd: list[str], mode: str) -> subprocess.Popen:
        with (self.log_dir / f"{name}.log").open(mode) as log:  # the child holds its own descriptor
            return spawn(cmd, log, self.env)

    def extra_args(self, name: str) -> list[str]:
        """More flags for service `name` (a hook for subclasses, e.g. a metrics port each)."""
        return []

    def stop(self, timeout_s: float = 15.0) -> None:
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
        self.procs.clear()
        self._remove_snic_buckets()

    def _remove_snic_buckets(self) -> None:
        for path in snic_bucket_dir().glob(f"agentserve-snic-{self.ports.scheduler}-*"):
            path.unlink(missing_ok=True)

    def supervise(self, poll_s: float = 0.5) -> int:
        """Restart services that die (with backoff) until we are signalled (0) or one keeps dying
        (1); then stop everything. Call `catch_stop_signals` first: a signal raises `Stopped`."""
        try:
            while True:
                now = time.monotonic()
                for proc in self.procs:
                    if proc.restart_at is None and proc.popen.poll() is not None:
                        proc.restart_at = proc.restarts.died(now)
                        if proc.restart_at is None:
                            print(
                                f"agentserve: {proc.name} exited ({proc.popen.returncode}) after "
                                f"{proc.restarts.restarts} restarts; stopping all (logs in {self.log_dir})",
                                file=sys.stderr,
                            )
                            return 1
                        print(
                            f"agentserve: {proc.name} exited ({proc.popen.returncode}); restarting it in "
                            f"{proc.restart_at - now:.0f} s (logs in {self.log_dir})",
                            file=sys.stderr,
                        )
                    elif proc.restart_at is not None and now >= proc.restart_at:
                        proc.popen = self._spawn(proc.name, proc.cmd, "a")
                        proc.restarts.started(now)
                        proc.restart_at = None
                        print(f"agentserve: {proc.name} restarted (pid {proc.popen.pid})", file=sys.stderr)
                time.sleep(poll_s)
        except Stopped:
            return 0
        finally:
            self.stop()


def catch_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise `Stopped` in the main thread, at any phase: the start
    (warm-up included) and the supervision both stop every child before returning. A second
    signal during that stop is ignored, so the stop completes."""

    def handler(signum: int, _frame) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
