"""The scheduler runs without torch: it speaks the torch-free contract types, never the engine's.

Imported in a fresh interpreter, since this test process has long loaded torch for other tests.
import-linter states the same rule statically (pyproject.toml); this is the runtime check.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

# The two entry points of the scheduler process: the gRPC service and the OpenAI HTTP app.
SCHEDULER_MODULES = ("agentserve.scheduler.service", "agentserve.scheduler.http.app")
FORBIDDEN = ("torch", "agentserve.engine")


def loaded_after_import(module: str) -> list[str]:
    """Which of FORBIDDEN a fresh interpreter holds (itself or a submodule) after importing `module`;
    `lint-imports --contract scheduler-no-torch` names the import chains."""
    code = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    return [f for f in FORBIDDEN if any(m == f or m.startswith(f + ".") for m in loaded)]


@pytest.mark.parametrize("module", SCHEDULER_MODULES)
def test_importing_the_scheduler_loads_neither_torch_nor_the_engine(module: str) -> None:
    assert loaded_after_import(module) == []
