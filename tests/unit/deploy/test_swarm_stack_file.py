"""docker-compose.swarm.yml against docker-compose.yml and what Swarm honours: the same services,
images, commands and settings; no key Swarm ignores; state only where a placement constraint pins
it; every secret a file scripts/deploy_secrets.py writes. (tests/container/test_swarm_stack.py
deploys it.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deploy_files import (
    COMPOSE_FILE,
    STACK_FILE,
    compose_services,
    environment,
    stack,
)
from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

# Keys `docker stack deploy` refuses or ignores (the single-host file's start order, builds, names).
IGNORED_BY_SWARM = {"build", "depends_on", "pull_policy", "container_name", "restart", "network_mode", "links"}
# Settings the stack sets its own way, and why: secrets instead of the certs volume, API keys from
# a secret file, engines' addresses by subnet (see the stack file's header).
STACK_OWN = {
    "AGENTSERVE_INTERNAL_TLS_DIR",
    "AGENTSERVE_API_KEYS",
    "AGENTSERVE_API_KEYS_FILE",
    "AGENTSERVE_ADVERTISE_NETWORK",
}


def replicas(service: dict) -> int:
    return int(service.get("deploy", {}).get("replicas", 1))


def test_the_stack_runs_compose_s_services_with_the_same_images_commands_and_settings():
    compose = {name: s for name, s in compose_services(COMPOSE_FILE).items() if name != "certs"}
    services = compose_services(STACK_FILE)
    assert set(services) == set(compose)
    for name, service in services.items():
        assert service["image"] == compose[name]["image"], name
        assert service.get("command") == compose[name].get("command"), name
        ours, theirs = environment(service), environment(compose[name])
        assert {k: v for k, v in ours.items() if k not in STACK_OWN} == {
            k: v for k, v in theirs.items() if k not in STACK_OWN
        }, name
        assert replicas(service) == replicas(compose[name]), name
        assert service["stop_grace_period"] == compose[name]["stop_grace_period"], name  # engines drain
        assert not IGNORED_BY_SWARM & set(service), name


def test_the_tiny_model_overlay_applies_to_the_stack_as_to_compose():
    tiny = compose_services(COMPOSE_FILE.with_name("docker-compose.tiny.yml"))
    assert set(tiny) <= set(compose_services(STACK_FILE))


def test_a_service_with_a_volume_runs_only_on_nodes_labelled_for_it():
    services = compose_services(STACK_FILE)
    for name, service in services.items():
        constraints = service.get("deploy", {}).get("placement", {}).get("constraints", [])
        if service.get("volumes"):
            assert any(c.startswith("node.labels.agentserve.") for c in constraints), name
    assert services["kvstore"]["deploy"]["placement"]["constraints"] == ["node.labels.agentserve.kvstore == true"]
    assert services["kvstore"]["deploy"]["endpoint_mode"] == "dnsrr"  # every instance under one name


def test_every_secret_is_a_file_the_script_writes_and_each_service_gets_its_own_certificate(tmp_path: Path):
    load_script("deploy_secrets").write_secrets(tmp_path)
    spec = stack({"AGENTSERVE_SECRETS_DIR": str(tmp_path)})
    for name, secret in spec["secrets"].items():
        assert Path(secret["file"]).is_file(), name
    for name, service in spec["services"].items():
        mounted = {s["target"]: s for s in service.get("secrets", [])}
        if name == "tracing":
            assert not mounted
            continue
        assert {mounted[f]["source"] for f in ("cert.pem", "key.pem")} == {f"{name}_cert", f"{name}_key"}
        assert mounted["ca.pem"]["source"] == "ca"
        assert (mounted["key.pem"]["uid"], mounted["key.pem"]["mode"]) == ("10001", 0o400)
        assert environment(service)["AGENTSERVE_INTERNAL_TLS_DIR"] == "/run/secrets"
        if "AGENTSERVE_API_KEYS_FILE" in environment(service):
            assert mounted["api_keys"]["source"] == "api_keys"
    assert {n for n, s in spec["services"].items() if "AGENTSERVE_API_KEYS_FILE" in environment(s)} == {
        "scheduler",
        "toolproxy",
    }
