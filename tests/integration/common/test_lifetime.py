import os
import subprocess
import sys

import pytest

from agentserve.common.lifetime import PARENT_PID_ENV

pytestmark = pytest.mark.integration

CHILD = "from agentserve.common.lifetime import die_with_parent; die_with_parent(); print('started')"


def run_child(parent_pid: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != PARENT_PID_ENV}
    if parent_pid is not None:
        env[PARENT_PID_ENV] = parent_pid
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=60)


def test_a_child_of_a_live_parent_starts():
    result = run_child(str(os.getpid()))
    assert (result.returncode, result.stdout) == (0, "started\n")


def test_a_child_whose_parent_is_gone_does_not_start():
    result = run_child("1")  # not our pid: as if the parent died and the child was reparented
    assert result.returncode == 1
    assert result.stdout == ""
    assert "parent 1 is gone; not starting" in result.stderr


def test_without_the_variable_nothing_is_tied():
    result = run_child(None)
    assert (result.returncode, result.stdout) == (0, "started\n")
