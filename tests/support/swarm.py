"""Deploy docker-compose.swarm.yml as a stack on a single-node Docker Swarm for container tests.

`deploy_stack()` makes this daemon a swarm manager if it is not one (`docker swarm init` on
loopback), labels the node for the kvstore's and the scheduler's volumes, writes the secrets
(scripts/deploy_secrets.py), and runs `docker stack deploy` with the images
scripts/build_images.sh built, the tiny model (docker-compose.tiny.yml) and free host ports. It
waits until every service has all its replicas running healthy and the scheduler's /health says a
prefill and a decode engine registered. `SwarmStack.close()` leaves the daemon as it was: the stack,
its volumes, the labels and image tags it added go, and the swarm too if this made it.

The images are tagged for a registry on a loopback port where nothing listens: Swarm tries to pull
a task's image before it starts it, and with a name like `agentserve:dev` it would try Docker Hub;
this way the attempt stays on this machine, fails at once, and the local image runs. A published
port in Swarm listens on all of the node's interfaces (Swarm has no host IP); the services demand
an API key, and the tests dial only 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.compose import (
    ROOT,
    STARTUP_TIMEOUT_S,
    TINY_COMPOSE_FILE,
    HostPorts,
    LoopbackEndpoints,
    build_images,
)
from tests.support.processes import LOG_DIR, free_port

STACK_FILE = ROOT / "docker-compose.swarm.yml"
NODE_LABELS = ("agentserve.kvstore", "agentserve.scheduler")
# The images scripts/build_images.sh tags (the same variables name others, as for compose).
IMAGES = {
    "AGENTSERVE_IMAGE": os.environ.get("AGENTSERVE_IMAGE", "agentserve:dev"),
    "PHOENIX_IMAGE": os.environ.get("PHOENIX_IMAGE", "agentserve-phoenix:dev"),
}


def docker(*args: str, check: bool = True, timeout_s: float = 120, env: dict[str, str] | None = None) -> str:
    """`docker ARGS` (with `env` added to this process's environment); its stdout."""
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **(env or {})}
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout.strip()


@dataclass
class SwarmStack(LoopbackEndpoints):
    """One deployed stack, and what was changed on the daemon to deploy it (undone by `close`)."""

    name: str
    ports: HostPorts
    env: dict[str, str]
    secrets_dir: Path
    made_swarm: bool = False
    # node label -> the value it had before (None: it had none), to put back
    added_labels: dict[str, str | None] = field(default_factory=dict)
    added_tags: list[str] = field(default_factory=list)
    had_gwbridge: bool = True

    @property
    def api_key(self) -> str:
        return (self.secrets_dir / "client_api_key").read_text().strip()

    def replicas(self) -> dict[str, str]:
        """service (without the stack's prefix) -> "running/desired", as `docker service ls` shows it."""
        rows = docker(
            "service", "ls", "--filter", f"label=com.docker.stack.namespace={self.name}", "--format", "{{json .}}"
        )
        found = [json.loads(line) for line in rows.splitlines() if line]
        return {row["Name"].removeprefix(f"{self.name}_"): row["Replicas"] for row in found}

    def service_spec(self, service: str) -> dict:
        return json.loads(docker("service", "inspect", f"{self.name}_{service}"))[0]["Spec"]

    def logs(self, tail: int = 80) -> str:
        parts = []
        for service in self.replicas():
            out = subprocess.run(
                [
                    "docker",
                    "service",
                    "logs",
                    "--no-trunc",
                    "--timestamps",
                    "--tail",
                    str(tail),
                    f"{self.name}_{service}",
                ],
                capture_output=True,
                text=True,
            )
            parts.append(out.stdout + out.stderr)
        return "\n".join(parts)

    def save_logs(self) -> Path:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        path = LOG_DIR / f"swarm-{self.name}.log"
        path.write_text(self.logs(tail=1000))
        return path

    # ---- readiness ----
    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Every service at its desired replicas (a task counts once its health check passes), then
        the scheduler's /health at 200: a prefill and a decode engine registered."""
        deadline = time.monotonic() + timeout_s
        while True:
            replicas = self.replicas()
            waiting = {s: r for s, r in replicas.items() if not _all_running(r)}
            if replicas and not waiting and self._scheduler_healthy():
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"stack {self.name} not ready: {waiting or 'scheduler /health'}\n{self.logs()}")
            time.sleep(1)

    def _scheduler_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    # ---- lifecycle ----
    def close(self) -> None:
        """Remove the stack and its volumes, then undo labels, tags and the swarm, as they were."""
        try:
            docker("stack", "rm", self.name, check=False)
            self._wait_gone()
            volumes = docker("volume", "ls", "-q", "--filter", f"label=com.docker.stack.namespace={self.name}")
            if volumes:
                docker("volume", "rm", *volumes.split(), check=False)
            if self.added_labels and not self.made_swarm:
                restore = []
                for label, before in self.added_labels.items():
                    restore += ["--label-rm", label] if before is None else ["--label-add", f"{label}={before}"]
                docker("node", "update", *restore, node_id())
            if self.made_swarm:
                docker("swarm", "leave", "--force")
                if not self.had_gwbridge:
                    _remove_gwbridge()
        finally:
            for tag in self.added_tags:
                docker("image", "rm", tag, check=False)
            shutil.rmtree(self.secrets_dir, ignore_errors=True)

    def _wait_gone(self, timeout_s: float = 120) -> None:
        """`stack rm` returns at once; its containers and networks go after it."""
        deadline = time.monotonic() + timeout_s
        label = f"label=com.docker.stack.namespace={self.name}"
        while time.monotonic() < deadline:
            if not docker("ps", "-aq", "--filter", label) and not docker("network", "ls", "-q", "--filter", label):
                return
            time.sleep(1)


def deploy_stack(timeout_s: float = STARTUP_TIMEOUT_S) -> SwarmStack:
    """Build images, make sure of a swarm, deploy a fresh stack on free ports, wait until ready."""
    build_images()
    name = f"agentserve-swarm-test-{uuid.uuid4().hex[:8]}"
    ports = HostPorts.free()
    secrets_dir = Path(tempfile.mkdtemp(prefix="agentserve-swarm-secrets-"))
    stack = SwarmStack(name, ports, env={}, secrets_dir=secrets_dir)
    deployed = False
    try:
        _join_swarm(stack)
        _label_node(stack)
        _tag_images(stack)
        _write_secrets(stack)
        stack.env.update(ports.env(), AGENTSERVE_SECRETS_DIR=str(secrets_dir))
        started = time.monotonic()
        files = ("-c", str(STACK_FILE), "-c", str(TINY_COMPOSE_FILE))
        docker("stack", "deploy", "--resolve-image", "never", *files, name, env=stack.env)
        deployed = True
        stack.wait_ready(timeout_s)
        print(f"[swarm] {name} ready in {time.monotonic() - started:.0f}s", file=sys.stderr)
    except BaseException:
        if deployed:
            stack.save_logs()
        stack.close()
        raise
    return stack


def _remove_gwbridge(timeout_s: float = 30) -> None:
    """The bridge `swarm init` made: it is still in use for a moment after `swarm leave`."""
    deadline = time.monotonic() + timeout_s
    while docker("network", "ls", "-q", "--filter", "name=^docker_gwbridge$"):
        if time.monotonic() >= deadline:
            raise RuntimeError("docker_gwbridge, made by this test's `swarm init`, is still there")
        docker("network", "rm", "docker_gwbridge", check=False)
        time.sleep(1)


def _all_running(replicas: str) -> bool:
    """`docker service ls`'s "2/2" (or "1/1 (max 1 per node)"): every desired task running."""
    running, desired = replicas.split()[0].split("/")
    return running == desired != "0"


def node_id() -> str:
    return docker("info", "--format", "{{.Swarm.NodeID}}")


def _join_swarm(stack: SwarmStack) -> None:
    state, manager = docker("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").split()
    if state == "active":
        if manager != "true":
            raise RuntimeError("this Docker daemon is a swarm worker: a stack deploys from a manager")
        return
    if state != "inactive":
        raise RuntimeError(f"this Docker daemon's swarm state is {state!r}")
    stack.had_gwbridge = bool(docker("network", "ls", "-q", "--filter", "name=^docker_gwbridge$"))
    # The swarm's own ports (2377 control, 7946 gossip) on loopback only.
    docker("swarm", "init", "--advertise-addr", "127.0.0.1", "--listen-addr", "127.0.0.1:2377")
    stack.made_swarm = True


def _label_node(stack: SwarmStack) -> None:
    node = node_id()
    labels = json.loads(docker("node", "inspect", node, "--format", "{{json .Spec.Labels}}")) or {}
    missing = [label for label in NODE_LABELS if labels.get(label) != "true"]
    if missing:
        docker("node", "update", *(a for label in missing for a in ("--label-add", f"{label}=true")), node)
        stack.added_labels = {label: labels.get(label) for label in missing}


def _tag_images(stack: SwarmStack) -> None:
    registry = f"127.0.0.1:{free_port()}"
    for variable, image in IMAGES.items():
        tag = f"{registry}/{image.rsplit('/', 1)[-1]}"
        docker("image", "tag", image, tag)
        stack.added_tags.append(tag)
        stack.env[variable] = tag


def _write_secrets(stack: SwarmStack) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "deploy_secrets.py"), "--out", str(stack.secrets_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
