"""Container tier: one compose deployment for the whole tier, shared by every container test;
it goes down after the last of them.

The deployment serves the tiny model (docker-compose.tiny.yml over docker-compose.yml, whose
default is SmolLM2-135M-Instruct): the tests check exact tokens against the same tiny model
recomputed on the host, and its speed keeps the tier's turns, scale-ups and restarts within minutes
on a few shared cores.

Tests that change the deployment (kill, scale) put it back before they return, so the order of
tests does not matter. A failed test gets the containers' recent logs in its report; the full
logs of the deployment land in $AGENTSERVE_TEST_LOGS (default /tmp/agentserve-test-logs).
"""

from __future__ import annotations

import sys

import pytest

from tests.support.compose import TINY_COMPOSE_FILE, Stack, start_stack


@pytest.fixture(scope="package")
def stack() -> Stack:
    running = start_stack([TINY_COMPOSE_FILE])
    try:
        yield running
    finally:
        print(f"\n[compose] logs of {running.project}: {running.save_logs()}", file=sys.stderr)
        running.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        for running in getattr(item, "funcargs", {}).values():
            if isinstance(running, Stack):  # the tier's deployment, or a test's own
                report.sections.append(("compose logs (last 60 lines per container)", running.logs(tail=60)))
