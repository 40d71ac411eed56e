"""Which stored diff blocks are read against which master (TokenDance's master + diff storage).

A diff block is useless without its master, so the store keeps a master while any of its mirrors
(the diffs written against it) is stored: eviction passes over it, as over a pinned block, until
its mirrors are gone. Deleting or dropping a master takes its mirrors with it. In memory only,
rebuilt at start from the diffs' headers (`SsdTier.scanned_masters`). Not thread-safe: `KVStore`
calls it under its lock.
"""

from __future__ import annotations


class Mirrors:
    def __init__(self) -> None:
        self._master_of: dict[bytes, bytes] = {}
        self._mirrors: dict[bytes, set[bytes]] = {}

    def add(self, diff_id: bytes, master_id: bytes) -> None:
        self._master_of[diff_id] = master_id
        self._mirrors.setdefault(master_id, set()).add(diff_id)

    def remove(self, block_id: bytes) -> None:
        """Forget `block_id` as a diff (a master's own entry goes when its last mirror does)."""
        master_id = self._master_of.pop(block_id, None)
        if master_id is None:
            return
        mirrors = self._mirrors[master_id]
        mirrors.discard(block_id)
        if not mirrors:
            del self._mirrors[master_id]

    def has_mirrors(self, master_id: bytes) -> bool:
        return master_id in self._mirrors

    def of(self, master_id: bytes) -> list[bytes]:
        """The mirrors of `master_id`, in a stable order."""
        return sorted(self._mirrors.get(master_id, ()))

    def master_of(self, diff_id: bytes) -> bytes | None:
        return self._master_of.get(diff_id)

    def __len__(self) -> int:
        return len(self._master_of)
