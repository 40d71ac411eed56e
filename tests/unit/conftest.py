"""The unit tier opens no socket and starts no process (tests/support/no_io.py): the entry points are
refused from before the tier's first fixture (package scope, so module fixtures are covered too)
until its last test, and a test during which one was tried fails. The fixtures the tiers share are
in tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.no_io import forbid_sockets_and_processes


@pytest.fixture(scope="package", autouse=True)
def _no_sockets_or_processes() -> Iterator[list[str]]:
    with pytest.MonkeyPatch.context() as patch:
        yield forbid_sockets_and_processes(patch)


@pytest.fixture(autouse=True)
def isolated(_no_sockets_or_processes: list[str]) -> Iterator[None]:
    """Fails the test if it (or a fixture it set up) opened a socket or started a process, also
    where the code under test caught the error."""
    attempts = _no_sockets_or_processes
    yield
    if attempts:
        tried = ", ".join(attempts)
        attempts.clear()
        pytest.fail(f"unit test opened a socket or started a process: {tried}")
