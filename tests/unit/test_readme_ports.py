"""The README's service table states the ports docker-compose.yml (and the tracing image) use."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PORT_VARIABLES = {
    "gRPC": "AGENTSERVE_GRPC_PORT",
    "internal gRPC": "AGENTSERVE_INTERNAL_PORT",
    "HTTP": "AGENTSERVE_HTTP_PORT",
    "metrics": "AGENTSERVE_METRICS_PORT",
}


def readme_table() -> dict[str, tuple[dict[str, int], set[int]]]:
    """service -> ({"gRPC": port, ...}, published host ports), from the README's service table."""
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[a-z]+", cells[0]) and cells[0] != "service":
            ports = {name: int(port) for name, port in re.findall(r"([A-Za-z ]+?) (\d+)", cells[2].replace(",", ""))}
            rows[cells[0]] = ({k.strip(): v for k, v in ports.items()}, {int(p) for p in re.findall(r"\d+", cells[3])})
    return rows


def compose_ports() -> dict[str, tuple[dict[str, int], set[int]]]:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    result = {}
    for name, service in compose["services"].items():
        env = service.get("environment", {})
        ports = {label: int(env[var]) for label, var in PORT_VARIABLES.items() if var in env}
        # "127.0.0.1:${AGENTSERVE_GRPC_HOST_PORT:-50051}:50051": the host side's default
        published = {int(re.search(r":-(\d+)\}", p).group(1)) for p in service.get("ports", [])}
        result[name] = (ports, published)
    return result


def test_readme_ports_match_compose():
    readme = readme_table()
    compose = compose_ports()
    assert set(readme) == set(compose)
    for name, (ports, published) in compose.items():
        if name == "tracing":
            continue  # its ports come from its image, below
        assert readme[name] == (ports, published), name


def test_readme_tracing_ports_match_the_image_and_the_exporters():
    ports, published = readme_table()["tracing"]
    dockerfile = (ROOT / "images" / "phoenix.Dockerfile").read_text()
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", dockerfile, re.MULTILINE).group(1).split()}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    otlp = int(compose["x-env"]["OTEL_EXPORTER_OTLP_ENDPOINT"].rsplit(":", 1)[1])
    assert ports == {"UI": 6006, "OTLP gRPC": otlp} and set(ports.values()) == exposed
    assert published == compose_ports()["tracing"][1] == {6006}
