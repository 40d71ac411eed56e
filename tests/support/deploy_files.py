"""The deployment files read as data: docker-compose.yml (the reference), the Swarm stack file and
the Kubernetes manifests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
STACK_FILE = ROOT / "docker-compose.swarm.yml"
K8S_DIR = ROOT / "deploy" / "k8s"
# ${NAME:-default} and ${NAME}
_VARIABLE = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str] | None = None) -> Any:
    """A compose value with its ${VARIABLE:-default}s replaced from `env`, else by their defaults."""
    if isinstance(value, str):
        return _VARIABLE.sub(lambda m: (env or {}).get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def compose_services(path: Path, env: dict[str, str] | None = None) -> dict[str, dict]:
    """The services of a compose or stack file, anchors merged and variables interpolated."""
    return interpolate(yaml.safe_load(path.read_text()), env)["services"]


def stack(env: dict[str, str] | None = None) -> dict:
    return interpolate(yaml.safe_load(STACK_FILE.read_text()), env)


def environment(service: dict) -> dict[str, str]:
    """A service's environment as a mapping (compose allows a list of NAME=VALUE too)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def k8s_documents() -> list[tuple[str, dict]]:
    """(file name, resource) for every document of every manifest in deploy/k8s."""
    return [
        (path.name, doc)
        for path in sorted(K8S_DIR.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def k8s_workloads() -> dict[str, dict]:
    """Deployments and StatefulSets by name."""
    return {d["metadata"]["name"]: d for _, d in k8s_documents() if d["kind"] in ("Deployment", "StatefulSet")}
