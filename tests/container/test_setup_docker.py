"""scripts/setup_docker.sh leaves a `docker compose` that survives deleting the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.compose import TEST_TIMEOUT_S

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_compose_plugin_is_a_file_of_its_own_outside_any_checkout_or_virtualenv():
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([str(ROOT / "scripts" / "setup_docker.sh")], check=True, env=env, capture_output=True)
    info = subprocess.run(
        ["docker", "info", "--format", "{{json .ClientInfo.Plugins}}"], check=True, capture_output=True, text=True
    )
    (compose,) = [p for p in json.loads(info.stdout) if p["Name"] == "compose"]
    plugin = Path(compose["Path"])
    assert compose["Version"].startswith("v2.")
    # A real file, not a link into a .venv or site-packages that goes away with its environment.
    assert not plugin.is_symlink() and plugin.is_file(), plugin
    assert plugin.resolve() == plugin
    assert ROOT not in plugin.parents
    assert not {".venv", "site-packages"} & set(plugin.parts), plugin
