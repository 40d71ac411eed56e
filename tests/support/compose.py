"""Bring the docker compose deployment up for container tests, drive it, tear it down.

`start_stack()` builds the images (a no-op when they are current), starts `docker-compose.yml`
under a unique project name with free 127.0.0.1 host ports, and waits until every container is
healthy and the published scheduler gRPC (health SERVING) and Phoenix HTTP ports answer.
`Stack.close()` removes containers, networks and volumes. Tests only ever dial the published
loopback ports; container-to-container checks run inside the containers (`Stack.exec`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# testcontainers reads these at import: no reaper (its image cannot be pulled) and the daemon's
# own host rather than the docker0 gateway (this machine has /.dockerenv).
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

from testcontainers.compose import ComposeContainer, DockerCompose

from tests.support.phoenix import PhoenixClient
from tests.support.processes import LOG_DIR, free_port, wait_serving

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
TINY_COMPOSE_FILE = ROOT / "docker-compose.tiny.yml"  # the tiny model instead of SmolLM2
# Several schedulers over etcd behind HAProxy, with the services that adds.
SCHEDULERS_COMPOSE_FILE = ROOT / "docker-compose.schedulers.yml"
SERVICES = ("kvstore", "scheduler", "prefill", "decode", "toolproxy", "tracing")
SCHEDULERS_SERVICES = (*SERVICES, "etcd", "balancer")
# One-shot services that must have exited 0 before the others start (the internal plane's certificates).
ONE_SHOT = ("certs",)
DEFAULT_REPLICAS = {"decode": 2}
STARTUP_TIMEOUT_S = float(os.environ.get("AGENTSERVE_STACK_TIMEOUT_S", "900"))
# pytest-timeout's limit for a container test: whichever test runs first also builds the images (up
# to 20 minutes on a fresh machine) and starts the stack (up to STARTUP_TIMEOUT_S); one that scales
# or restores the stack waits for it to be ready again.
TEST_TIMEOUT_S = STARTUP_TIMEOUT_S + 1200


@functools.cache
def build_images() -> None:
    """scripts/build_images.sh: builds what changed, else returns in seconds; once per test run (the
    compose and the Swarm deployments run the same images)."""
    env = {**os.environ, "PYTHON": sys.executable}
    started = time.monotonic()
    result = subprocess.run(
        [str(ROOT / "scripts" / "build_images.sh")], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"scripts/build_images.sh failed ({result.returncode}):\n{result.stderr[-4000:]}")
    print(f"[compose] images ready in {time.monotonic() - started:.0f}s", file=sys.stderr)


@dataclass(frozen=True)
class HostPorts:
    """The 127.0.0.1 ports a stack publishes, as compose variables."""

    grpc: int
    http: int
    toolproxy: int
    phoenix: int

    @classmethod
    def free(cls) -> HostPorts:
        return cls(free_port(), free_port(), free_port(), free_port())

    def env(self) -> dict[str, str]:
        return {
            "AGENTSERVE_GRPC_HOST_PORT": str(self.grpc),
            "AGENTSERVE_HTTP_HOST_PORT": str(self.http),
            "AGENTSERVE_TOOLPROXY_HOST_PORT": str(self.toolproxy),
            "AGENTSERVE_PHOENIX_HOST_PORT": str(self.phoenix),
        }


@dataclass
class _ProjectCompose(DockerCompose):
    """DockerCompose under an explicit project name (`-p`), so stacks never collide."""

    project_name: str = "agentserve"

    @cached_property
    def compose_command_property(self) -> list[str]:
        return [*DockerCompose.compose_command_property.func(self), "-p", self.project_name]


class LoopbackEndpoints:
    """The client endpoints a deployment publishes on 127.0.0.1, at its `ports`."""

    ports: HostPorts

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.http}"

    @property
    def toolproxy_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.toolproxy}"


class Stack(LoopbackEndpoints):
    """One running compose project."""

    def __init__(
        self,
        project: str,
        ports: HostPorts,
        files: list[Path],
        env_file: Path,
        services: tuple[str, ...] = SERVICES,
        replicas: dict[str, int] | None = None,
    ):
        """`services` must all be healthy for the stack to be ready, each with `replicas` containers
        (DEFAULT_REPLICAS, else 1)."""
        self.project = project
        self.ports = ports
        self.env_file = env_file
        self.services = services
        self.replicas = {**DEFAULT_REPLICAS, **(replicas or {})}
        self.compose = _ProjectCompose(
            context=str(ROOT),
            compose_file_name=[str(f) for f in files],
            env_file=str(env_file),
            wait=False,
            project_name=project,
        )

    @property
    def phoenix_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.phoenix}"

    @cached_property
    def phoenix(self) -> PhoenixClient:
        return PhoenixClient(self.phoenix_url)

    # ---- compose ----
    def run(self, *args: str, check: bool = True, timeout_s: float | None = None) -> subprocess.CompletedProcess:
        """`docker compose -p PROJECT -f ... --env-file ... ARGS`."""
        result = subprocess.run(
            [*self.compose.docker_compose_command(), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
        )
        if check and result.returncode != 0:
            raise RuntimeError(
                f"docker compose {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
            )
        return result

    def containers(self, service: str | None = None) -> list[ComposeContainer]:
        """Containers of `service` (all services if None), stopped ones included, by replica number."""
        found = [c for c in self.compose.get_containers(include_all=True) if service is None or c.Service == service]
        return sorted(found, key=lambda c: (c.Service or "", replica_number(c)))

    def container(self, service: str, replica: int = 1) -> ComposeContainer:
        for c in self.containers(service):
            if replica_number(c) == replica:
                return c
        raise LookupError(f"no {service} replica {replica} in {self.project}")

    def kill(self, service: str, replica: int = 1, signal: str = "KILL") -> ComposeContainer:
        """`docker kill` one container of `service`; returns it (as it was before the kill)."""
        target = self.container(service, replica)
        subprocess.run(["docker", "kill", "--signal", signal, target.Name], check=True, capture_output=True)
        return target

    def scale(self, service: str, replicas: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Set `service` to `replicas` containers, leaving the running ones alone, and wait healthy."""
        self.run("up", "-d", "--no-recreate", "--scale", f"{service}={replicas}", timeout_s=timeout_s)
        self.replicas[service] = replicas
        self.wait_ready(timeout_s)

    def restore(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Start whatever was killed or stopped again, at the current replica counts."""
        scales = [arg for svc, n in self.replicas.items() for arg in ("--scale", f"{svc}={n}")]
        self.run("up", "-d", "--no-recreate", *scales, timeout_s=timeout_s)
        self.wait_ready(timeout_s)

    def exec(self, service: str, command: list[str], replica: int = 1, check: bool = True) -> str:
        """Run `command` inside one container; returns its stdout."""
        result = self.run("exec", "-T", "--index", str(replica), service, *command, check=check)
        return result.stdout

    def logs(self, *services: str, tail: int | None = None) -> str:
        args = ["logs", "--no-color", "--timestamps"] + (["--tail", str(tail)] if tail else [])
        result = self.run(*args, *services, check=False)
        return result.stdout + result.stderr

    # ---- readiness ----
    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Every expected container healthy, then the published gRPC and Phoenix ports answering."""
        deadline = time.monotonic() + timeout_s
        while True:
            problem = self._not_ready()
            if problem is None:
                break
            if problem.startswith("exited:") or time.monotonic() >= deadline:
                raise RuntimeError(f"stack {self.project} not ready: {problem}\n{self.logs(tail=80)}")
            time.sleep(1)
        wait_serving(self.grpc_address, timeout_s=max(deadline - time.monotonic(), 5))
        while not self.phoenix.healthy():
            if time.monotonic() >= deadline:
                raise RuntimeError(f"Phoenix at {self.phoenix_url} does not answer\n{self.logs('tracing', tail=80)}")
            time.sleep(0.5)

    def _not_ready(self) -> str | None:
        containers = self.containers()
        for c in containers:
            if c.State in ("exited", "dead") and not (c.Service in ONE_SHOT and c.ExitCode == 0):
                return f"exited: {c.Name} ({c.State}, exit code {c.ExitCode})"
        for service in self.services:
            want = self.replicas.get(service, 1)
            have = [c for c in containers if c.Service == service]
            if len(have) < want:
                return f"{service}: {len(have)} of {want} containers"
            unhealthy = [f"{c.Name}={c.Health or c.State}" for c in have if c.Health != "healthy"]
            if unhealthy:
                return ", ".join(unhealthy)
        return None

    # ---- lifecycle ----
    def start(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        started = time.monotonic()
        try:
            self.compose.start()
            self.wait_ready(timeout_s)
        except BaseException:
            self.save_logs()
            self.close()
            raise
        print(f"[compose] {self.project} ready in {time.monotonic() - started:.0f}s", file=sys.stderr)

    def save_logs(self) -> Path:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        path = LOG_DIR / f"compose-{self.project}.log"
        path.write_text(self.logs())
        return path

    def close(self) -> None:
        """`down --volumes`: containers, networks and named volumes go."""
        try:
            self.compose.stop(down=True)
        finally:
            shutil.rmtree(self.env_file.parent, ignore_errors=True)


def replica_number(container: ComposeContainer) -> int:
    """Compose names containers PROJECT-SERVICE-N; N is the replica number."""
    tail = (container.Name or "").rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def start_stack(
    extra_files: list[Path] | None = None,
    build: bool = True,
    timeout_s: float = STARTUP_TIMEOUT_S,
    env: dict[str, str] | None = None,
    services: tuple[str, ...] = SERVICES,
    replicas: dict[str, int] | None = None,
) -> Stack:
    """Build images, start a fresh project on free ports (and compose variables `env`), wait until
    `services` are ready with their `replicas`. Caller closes it."""
    if build:
        build_images()
    project = f"agentserve-test-{uuid.uuid4().hex[:8]}"
    ports = HostPorts.free()
    env_file = Path(tempfile.mkdtemp(prefix="agentserve-compose-")) / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in {**ports.env(), **(env or {})}.items()))
    stack = Stack(project, ports, [COMPOSE_FILE, *(extra_files or [])], env_file, services, replicas)
    stack.start(timeout_s)
    return stack
