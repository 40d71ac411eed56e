import threading
import time

import pytest

from agentserve.kvstore.commit import GroupCommitter, Staged

pytestmark = pytest.mark.unit


class FakeDisk:
    def __init__(self, fail: bool = False) -> None:
        self.syncs = 0
        self.installed: list[bytes] = []
        self.discarded: list[bytes] = []
        self.fail = fail

    def sync(self) -> None:
        self.syncs += 1
        time.sleep(0.02)  # long enough for other writers to queue up behind a commit
        if self.fail:
            raise OSError(5, "EIO")

    def install(self, item: Staged) -> None:
        self.installed.append(item.block_id)
        item.stored = True

    def discard(self, item: Staged) -> None:
        self.discarded.append(item.block_id)


def staged(n: int) -> Staged:
    return Staged(bytes([n]) * 16, f"/tmp/{n}.tmp", f"/tmp/{n}.kv", 1)


def commit_concurrently(committer: GroupCommitter, writers: int) -> tuple[list[Staged], list[BaseException]]:
    items = [staged(i) for i in range(writers)]
    errors: list[BaseException] = []
    start = threading.Barrier(writers)

    def writer(item: Staged) -> None:
        start.wait()
        try:
            committer.commit([item])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(item,)) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return items, errors


def test_concurrent_writers_share_syncs_and_all_get_installed():
    disk = FakeDisk()
    items, errors = commit_concurrently(GroupCommitter(disk.sync, disk.install, disk.discard), writers=8)
    assert errors == [] and all(item.stored for item in items)
    assert sorted(disk.installed) == sorted(item.block_id for item in items)
    assert disk.syncs % 2 == 0 and disk.syncs < 2 * 8  # two syncs per batch, fewer batches than writers


def test_a_failed_sync_fails_every_writer_of_the_batch_and_discards_their_files():
    disk = FakeDisk(fail=True)
    items, errors = commit_concurrently(GroupCommitter(disk.sync, disk.install, disk.discard), writers=4)
    assert len(errors) == 4 and all(isinstance(e, OSError) for e in errors)
    assert disk.installed == [] and sorted(disk.discarded) == sorted(item.block_id for item in items)
