"""Fixtures of the store's unit tests: stores on a temp dir, and named blocks to put in them."""

import pytest

from agentserve.kvstore.store import KVStore
from tests.support.kv_blocks import block_size, chain, make_block

SIZE = block_size()


@pytest.fixture
def open_store(tmp_path):
    """Open KVStores on one data dir with budgets in blocks; all are closed at teardown."""
    opened: list[KVStore] = []

    def make(dram_blocks: float = 0, ssd_blocks: float = 100, **kwargs) -> KVStore:
        opened.append(
            KVStore.open(
                tmp_path,
                dram_budget_bytes=int(dram_blocks * SIZE),
                ssd_budget_bytes=int(ssd_blocks * SIZE),
                fsync=False,
                **kwargs,
            )
        )
        return opened[-1]

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def blocks():
    """Five named blocks a..e, each its own chain so ids are independent."""
    return {
        name: (chain(1, salt=name)[0], make_block(chain(1, salt=name)[0], seed=i)) for i, name in enumerate("abcde")
    }
