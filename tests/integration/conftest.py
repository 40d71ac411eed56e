"""The integration tier's time limit, and clusters shared across modules.

A test here that starts a cluster (in its module's first test) spends up to a few minutes of its
pytest-timeout on the start on a busy 2-core machine, so the tier's limit is INTEGRATION_TIMEOUT_S
rather than pyproject's 300 s; a test with its own `timeout` mark keeps it.

Clusters shared across modules. Starting a cluster (five to six processes, each loading the model
and warming up) is most of what a small integration module costs, so the modules whose tests leave
a cluster as they found it (no process killed, stopped or restarted, no setting of their own, and
prompts of their own so no test depends on another's cache) use one per shape for the whole tier.

Under pytest-xdist (`--dist loadgroup`, scripts/test.sh) each test carries an `xdist_group`: its
module's, or, for a whole module, that of the first cluster one of its tests shares beyond the
module (a session cluster here, or a package's `cluster` in `CLUSTER_PACKAGES`). So a worker runs a
module whole (its module-scoped cluster starts once), and every module on one shared cluster runs
on the same worker (it starts once in the tier, not once per worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import local_cluster

INTEGRATION_TIMEOUT_S = 600
HERE = Path(__file__).parent


SHARED_CLUSTERS = ("shared_cluster", "shared_cluster_one_decode")
CLUSTER_PACKAGES = ("engines",)  # packages whose conftest starts a package-scoped `cluster`


def _shared_group(item: pytest.Item) -> str | None:
    """The cluster `item` shares beyond its module, if any."""
    names = getattr(item, "fixturenames", ())
    shared = [name for name in SHARED_CLUSTERS if name in names]
    if shared:
        return shared[0]
    package = item.path.relative_to(HERE).parts[0]
    return package if package in CLUSTER_PACKAGES and "cluster" in names else None


# tryfirst: pytest-xdist reads the group marks in its own hook of this name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    ours = [item for item in items if item.path.is_relative_to(HERE)]
    # A module goes whole to the group of the first shared cluster one of its tests uses.
    groups: dict[Path, str] = {}
    for item in ours:
        group = _shared_group(item)
        if group is not None:
            groups.setdefault(item.path, group)
    for item in ours:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT_S))
        item.add_marker(pytest.mark.xdist_group(groups.get(item.path, item.path.relative_to(HERE).as_posix())))


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """`LocalCluster` as `up --local` starts it: one prefill and two decode engines."""
    with local_cluster(tmp_path_factory, "shared") as running:
        yield running


@pytest.fixture(scope="session")
def shared_cluster_one_decode(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """`LocalCluster` with one prefill and one decode engine."""
    with local_cluster(tmp_path_factory, "shared-one-decode", decoders=1) as running:
        yield running
