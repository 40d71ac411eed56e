"""deploy/k8s against the Kubernetes API schemas (kubernetes-validate, strict: an unknown field fails)
and against docker-compose.yml: the same images, commands, ports and Secrets, probes on every
container. No cluster runs here; this is what is checked without one."""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy_files import (
    COMPOSE_FILE,
    compose_services,
    environment,
    k8s_documents,
    k8s_workloads,
)
from tests.support.scripts import load_script

pytestmark = pytest.mark.unit

# The oldest Kubernetes the manifests are written for, and the newest the pinned package knows.
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
HEALTHCHECK = ["python", "-m", "agentserve.common.healthcheck"]

secrets_script = load_script("deploy_secrets")


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("secrets")
    secrets_script.write_secrets(out)
    return out


def containers(workload: dict) -> list[dict]:
    return workload["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_and_the_generated_secrets_validate_strictly(version: str, secrets: Path):
    documents = k8s_documents() + [
        ("k8s-secrets.yaml", d) for d in yaml.safe_load_all(secrets.joinpath("k8s-secrets.yaml").read_text())
    ]
    assert {d["kind"] for _, d in documents} >= {"ConfigMap", "Service", "Deployment", "StatefulSet", "Secret"}
    for name, document in documents:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {document['kind']} {document['metadata']['name']}: {exc}")


def test_validation_refuses_a_misspelt_field():
    deployment = copy.deepcopy(k8s_workloads()["decode"])
    containers(deployment)[0]["readinessProbes"] = containers(deployment)[0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinessProbes"):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_each_compose_service_has_a_workload_with_its_image_command_and_ports():
    workloads = k8s_workloads()
    compose = {name: s for name, s in compose_services(COMPOSE_FILE).items() if name != "certs"}
    assert set(workloads) == set(compose)
    for name, service in compose.items():
        (container,) = containers(workloads[name])
        assert container["image"] == service["image"], name
        grace = workloads[name]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert f"{grace}s" == service["stop_grace_period"], name  # engines drain on SIGTERM
        assert container.get("command") == service.get("command"), name
        env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        wanted = {
            k: v for k, v in environment(service).items() if k.endswith("_PORT") and k != "AGENTSERVE_METRICS_PORT"
        }
        assert {k: env.get(k) for k in wanted} == wanted, name


def test_the_config_map_serves_compose_s_model_and_settings():
    (config,) = [d for _, d in k8s_documents() if d["kind"] == "ConfigMap"]
    compose = compose_services(COMPOSE_FILE)
    scheduler, decode = environment(compose["scheduler"]), environment(compose["decode"])
    for key in (
        "AGENTSERVE_MODEL_DIR",
        "AGENTSERVE_MODEL_NAME",
        "AGENTSERVE_KV_PATH_POLICY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        assert config["data"][key] == scheduler[key], key
    for key in ("AGENTSERVE_SCHEDULER_ADDRESS", "AGENTSERVE_KVSTORE_ADDRESS", "AGENTSERVE_FABRIC_PROFILE"):
        assert config["data"][key] == decode[key], key


def test_every_container_has_startup_readiness_and_liveness_probes_on_its_health_endpoints():
    for name, workload in k8s_workloads().items():
        (container,) = containers(workload)
        ports = {p["name"] for p in container["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = container[probe]
            if "exec" in spec:
                assert spec["exec"]["command"] == HEALTHCHECK, (name, probe)
            else:
                assert spec["httpGet"]["port"] in ports and spec["httpGet"]["path"] in ("/health", "/healthz"), (
                    name,
                    probe,
                )


def test_the_kvstore_and_the_scheduler_keep_their_state_on_persistent_volume_claims():
    workloads = k8s_workloads()
    for name, mount in (("kvstore", "/data/kv"), ("scheduler", "/data/sessions"), ("tracing", "/data")):
        workload = workloads[name]
        assert workload["kind"] == "StatefulSet", name
        (claim,) = workload["spec"]["volumeClaimTemplates"]
        mounts = {m["name"]: m["mountPath"] for m in containers(workload)[0]["volumeMounts"]}
        assert mounts[claim["metadata"]["name"]] == mount, name
    services = {d["metadata"]["name"]: d for _, d in k8s_documents() if d["kind"] == "Service"}
    # `kvstore` resolves to every ready pod: clients spread blocks over all of them.
    assert services["kvstore"]["spec"]["clusterIP"] == "None"
    # Engines register on the scheduler's internal port before it is ready for clients.
    assert services["scheduler"]["spec"]["publishNotReadyAddresses"] is True


def test_every_mounted_secret_is_one_the_script_writes_with_the_files_the_services_read(secrets: Path):
    written = {
        d["metadata"]["name"]: set(d["data"])
        for d in yaml.safe_load_all(secrets.joinpath("k8s-secrets.yaml").read_text())
    }
    mounted = set()
    for name, workload in k8s_workloads().items():
        for volume in workload["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in volume:
                mounted.add(volume["secret"]["secretName"])
        if name != "tracing":
            tls = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
            assert tls[0]["secret"]["secretName"] == secrets_script.tls_secret_name(name)
    assert mounted == set(written)
    assert all(keys == {"ca.pem", "cert.pem", "key.pem"} for n, keys in written.items() if n.endswith("-tls"))
    assert written[secrets_script.API_KEYS_SECRET] == {"api_keys"}
