"""LocalCluster: every service as a local process on loopback (`agentserve up --local`, benches, tests).

Starts them in dependency order (kvstore, scheduler, engines, toolproxy), waits for each to report
SERVING over gRPC health and for the scheduler's HTTP `/health` to say a prefill and a decode
engine have registered, then supervises: a service that exits is restarted with backoff
(`restarts.RestartPolicy`); on Ctrl-C / SIGTERM / SIGHUP, at any phase, all are stopped. Children
run in their own process group and die with this process even when it is SIGKILLed
(`process.spawn`). An engine that exits after a drain (scale-in: `agentserve drain`, or a
SIGTERM sent to it) is not restarted. On free ports (tests, benches: `LocalPorts.free`), a
service that exits at its start because another process bound one of its ports first
(`PORT_TAKEN_EXIT`) starts again on fresh ones; a service that fails to start otherwise fails the
start with the end of its log in the error. With several prefill engines (`--prefill N`) they are named prefill-0 ..
prefill-N-1; the first listens on the prefill port, the others on free ports. With `--compute
emulated` the engines run no model: each takes the target model's time on the target GPU from the
cost model (a dozen fit on two cores; `ComputeSettings`). The scheduler and the engines serve
`model_dir` (a folder or GGUF file, `engine.model_catalog`); without one, the tiny model, which the
tests and benches need for its speed (`up --local` passes its own default, SmolLM2-135M-Instruct).

Every service listens on loopback. Only the clients' endpoints (the scheduler's gRPC and HTTP, the
tool proxy's HTTP) may listen elsewhere (`listen_host`), and only with API keys configured.

The control plane (`ControlSettings`): one scheduler with its sessions in SQLite by default; with
state etcd, an etcd (Debian's etcd-server) starts first and holds the state; with several
schedulers (scheduler-0 .. scheduler-N-1, each on ports of its own) HAProxy takes the clients' and
the engines' ports in front of them (`balancer.py`), and the cluster is ready once every scheduler
sees a prefill and a decode engine.

The internal plane (engines, the store, the scheduler's internal port, the tool proxy's gRPC) runs
mutual TLS by default: certificates are issued at the first start into `<data_dir>-certs`
(`common/certs.py`, reused after) and each service gets its own directory; `internal_tls=False`
(`up --local --plain-internal`) runs it plain.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

import grpc

from agentserve.cluster.balancer import haproxy_config
from agentserve.cluster.commands import INFRASTRUCTURE, balancer_config, cert_root, scheduler_name, service_commands
from agentserve.cluster.ports import LOOPBACK, LocalPorts
from agentserve.cluster.process import Proc, spawn
from agentserve.cluster.readiness import ExitedEarly, health_channel, wait_ready, wait_serving
from agentserve.cluster.restarts import RestartPolicy, RestartState
from agentserve.cluster.settings import ComputeSettings, ControlSettings, FabricSettings, snic_bucket_dir
from agentserve.common.api_keys import ApiKeys
from agentserve.common.certs import ensure_certs
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.port_taken import PORT_TAKEN_EXIT
from agentserve.engine.model_catalog import TINY, ServedModel, resolve_model
from agentserve.model_files.tokenizer_files import models_home

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PORT_RETRIES = 3  # starts of one service on fresh ports after another process took one of its ports


class Stopped(Exception):
    """A stop signal arrived while `up --local` was starting or supervising its services."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def keys_of(env: Mapping[str, str]) -> ApiKeys:
    """The API keys the services will load from this environment (ValueError if malformed)."""
    return ApiKeys.load(env.get("AGENTSERVE_API_KEYS", ""), env.get("AGENTSERVE_API_KEYS_FILE", ""))


class LocalCluster:
    def __init__(  # noqa: PLR0913 - the cluster's layout, each with a default; fabric, compute, restarts as typed settings
        self,
        ports: LocalPorts = LocalPorts(),
        decoders: int = 2,
        prefill: int = 1,
        data_dir: Path | None = None,
        log_dir: Path | None = None,
        model_dir: Path | None = None,
        model_name: str | None = None,
        env: dict[str, str] | None = None,
        fabric: FabricSettings = FabricSettings(),
        compute: ComputeSettings = ComputeSettings(),
        listen_host: str = LOOPBACK,
        restart_policy: RestartPolicy = RestartPolicy(),
        internal_tls: bool = True,
        control: ControlSettings = ControlSettings(),
    ):
        if decoders < 1:
            raise ValueError(f"at least one decode engine is required, got decoders={decoders}")
        if prefill < 1:
            raise ValueError(f"at least one prefill engine is required, got prefill={prefill}")
        from agentserve.fabric.profiles import load_profile
        from agentserve.scheduler.paths import make_path_policy

        load_profile(fabric.profile)  # a bad name fails here, naming the profiles on offer
        make_path_policy(fabric.kv_path_policy)
        self.ports = ports.with_prefill(prefill).with_schedulers(control.schedulers)
        self.control = control
        self.prefill = prefill
        self.decoders = decoders
        self.fabric = fabric
        self.compute = compute
        home = models_home().parent
        self.data_dir = data_dir or home / "kvstore-local"
        self.log_dir = log_dir or home / "logs"
        self.model_dir = model_dir
        self.model_name = model_name
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
        model = self.served_model()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = {p.name for p in self.procs}
        if not started:
            self._remove_snic_buckets()  # a bucket left by an earlier cluster on these ports is stale
        if self.certs is not None:
            ensure_certs(self.certs)  # the first start issues them; later ones reuse what is valid
        try:
            for name, _, _ in self.service_commands(model):
                if before is not None and (name == before or name.startswith(f"{before}-")):
                    break
                if name in started:
                    continue
                if name == "haproxy":  # in front of the schedulers, on the ports they took
                    config = balancer_config(self.data_dir)
                    config.parent.mkdir(parents=True, exist_ok=True)
                    config.write_text(haproxy_config(self.ports, self.control.schedulers, self.listen_host))
                proc = self._launch(name, model)
                # Engines warm up in parallel; the rest must be up before their dependants start.
                if not name.startswith(("prefill", "decode")):
                    self._wait_serving(proc, model, timeout_s)
            for proc in self.procs:
                self._wait_serving(proc, model, timeout_s)
            if before is None:
                for scheduler in self.schedulers:
                    wait_ready(scheduler, self.scheduler_http_port(scheduler.name), timeout_s)
        except BaseException:
            self.stop()
            raise

    def service_commands(self, model: ServedModel) -> list[tuple[str, int, list[str]]]:
        """(name, gRPC port, command) of every service serving `model` on the current ports, in
        start order."""
        return service_commands(
            self.ports,
            model,
            self.data_dir,
            self.decoders,
            self.fabric,
            prefill=self.prefill,
            compute=self.compute,
            listen_host=self.listen_host,
            certs=self.certs,
            control=self.control,
        )

    def _launch(self, name: str, model: ServedModel) -> Proc:
        """Start service `name` on the current ports."""
        _, port, cmd = self._command(name, model)
        cmd = [*cmd, *self.extra_args(name)]
        # A scheduler's grpc_port faces clients, and etcd's and HAProxy's are not on the internal plane.
        plain = name.startswith("scheduler") or name in INFRASTRUCTURE
        probe = None if plain else self.internal_client()
        proc = Proc(name, port, self._spawn(name, cmd, "w"), cmd, probe, RestartState(self.restart_policy))
        proc.log = self.log_dir / f"{name}.log"
        proc.restarts.started(time.monotonic())
        self.procs.append(proc)
        return proc

    def _command(self, name: str, model: ServedModel) -> tuple[str, int, list[str]]:
        return next(command for command in self.service_commands(model) if command[0] == name)

    def _wait_serving(self, proc: Proc, model: ServedModel, timeout_s: float) -> None:
        """`wait_serving`; a service that exits because another process bound one of its ports
        between their pick and its bind (`PORT_TAKEN_EXIT`) moves to fresh ports and starts again,
        up to `PORT_RETRIES` times, when the ports were picked free. Safe while nothing started
        dials it: each service is ready before any that dials it starts (engines, dialled by none,
        register their address)."""
        for retry in range(PORT_RETRIES + 1):
            try:
                wait_serving(proc, timeout_s)
                return
            except ExitedEarly as exc:
                if exc.returncode != PORT_TAKEN_EXIT or not self.ports.movable or retry == PORT_RETRIES:
                    raise
                print(f"agentserve: {exc}\nagentserve: starting {proc.name} again on fresh ports", file=sys.stderr)
            self.ports = self.ports.reassigned(proc.name)
            _, proc.grpc_port, cmd = self._command(proc.name, model)
            proc.cmd = [*cmd, *self.extra_args(proc.name)]
            proc.popen = self._spawn(proc.name, proc.cmd, "a")  # after the failed start's lines
            proc.restarts.started(time.monotonic())

    def served_model(self) -> ServedModel:
        """What the scheduler and the engines serve: `model_dir` (the tiny model when None) under
        `model_name` (when None, the name the catalog gives that path)."""
        model = resolve_model(str(self.model_dir) if self.model_dir else TINY)
        return model if self.model_name is None else ServedModel(self.model_name, model.source)

    def respawn(self, name: str, timeout_s: float = 180.0) -> Proc:
        """Start service `name` again (after it died) and wait until it serves (tests kill one)."""
        proc = next(p for p in self.procs if p.name == name)
        if proc.popen.poll() is None:
            raise ValueError(f"{name} is still running (pid {proc.popen.pid})")
        proc.popen = self._spawn(name, proc.cmd, "a")
        proc.restarts.started(time.monotonic())
        wait_serving(proc, timeout_s)
        if name.startswith("scheduler"):
            wait_ready(proc, self.scheduler_http_port(name), timeout_s)
        return proc

    @property
    def schedulers(self) -> list[Proc]:
        """The scheduler processes started, in order."""
        names = [scheduler_name(i, self.control.schedulers) for i in range(self.control.schedulers)]
        return [p for p in self.procs if p.name in names]

    def scheduler_http_port(self, name: str) -> int:
        """The HTTP port of scheduler `name` itself (with several, not the balancer's)."""
        if name == "scheduler":
            return self.ports.http
        return self.ports.scheduler_instance(int(name.rsplit("-", 1)[1])).http

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
                for proc in list(self.procs):
                    if proc.restart_at is None and proc.popen.poll() is not None and drained(proc):
                        print(
                            f"agentserve: {proc.name} drained and exited; not restarting it (scaled in)",
                            file=sys.stderr,
                        )
                        self.procs.remove(proc)
                    elif proc.restart_at is None and proc.popen.poll() is not None:
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


def drained(proc: Proc) -> bool:
    """Whether an engine exited after draining (`agentserve drain`, or a SIGTERM sent to it alone):
    an engine exits 0 only then, and a scaled-in engine stays down."""
    return proc.name.startswith(("prefill", "decode")) and proc.popen.returncode == 0


def catch_stop_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise `Stopped` in the main thread, at any phase: the start
    (warm-up included) and the supervision both stop every child before returning. A second
    signal during that stop is ignored, so the stop completes."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Stopped(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
