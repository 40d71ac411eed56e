"""A second eviction policy for tests: shows a cache orders its evictions by the policy it is
given (by name), not by a built-in LRU."""

from collections.abc import Callable, Iterator

from agentserve.kv.eviction import EvictionPolicy


class MostRecentFirst(EvictionPolicy):
    """Evicts the most recently inserted or used block first; takes the interface's `pop_victim`."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._order: list[bytes] = []

    def insert(self, block_id: bytes, size: int) -> None:
        self.remove(block_id)
        self._order.append(block_id)

    def touch(self, block_id: bytes) -> None:
        if block_id in self._order:
            self.insert(block_id, 1)

    def remove(self, block_id: bytes) -> None:
        if block_id in self._order:
            self._order.remove(block_id)

    def victims(self) -> Iterator[bytes]:
        return reversed(self._order)

    def __len__(self) -> int:
        return len(self._order)
