"""`agentserve bench kvstore-soak`: a mixed load on a store whose budgets are far below the
working set; reports the most bytes each tier ever held next to its budget, and whether it kept
serving correct bytes.

Threads run concurrently for the whole time: writers (chains of new and already stored blocks),
readers (whole blocks and layer ranges, each checked against the bytes its id was written with),
a lifecycle thread (lookups, pins with short TTLs, unpins, hints, deletes), and a sampler that,
every second, sums the sizes of the files in the data dir (temp files of writes in flight
included), with evictions and installs held still so the sum is one instant's. The tiers' own
peaks (`max_bytes`) are exact: the SSD one counts bytes stored plus bytes reserved for writes in
flight at every reservation, an upper bound of the bytes on disk.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agentserve.bench.micro.kvstore.blocks import BlockMaker, block_id_for
from agentserve.kv.block_format import payload_range, read_header
from agentserve.kv.eviction import Hint
from agentserve.kvstore.store import KVStore, StoreFullError
from agentserve.kvstore.types import BlockRead

FINGERPRINT = "agentserve.bench.kvstore-soak"
NUM_LAYERS = 8


class _Load:
    def __init__(self, store: KVStore, working_set: int, seed: int) -> None:
        self.store = store
        self.makers = [BlockMaker(FINGERPRINT, size, NUM_LAYERS, seed=seed) for size in (16 << 10, 64 << 10, 256 << 10)]
        self.ids = [block_id_for(i, f"soak-{seed}") for i in range(working_set)]
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = {
            "writes": 0,
            "reads": 0,
            "read_hits": 0,
            "layer_reads": 0,
            "lookups": 0,
            "pins": 0,
            "deletes": 0,
            "store_full": 0,
            "wrong_bytes": 0,
            "errors": 0,
        }
        self.first_error = ""

    def block(self, block_id: bytes) -> bytes:
        return self.makers[block_id[0] % len(self.makers)].make(block_id)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[name] += n

    def guarded(self, body: Callable[[], object]) -> None:
        while not self.stop.is_set():
            try:
                body()
            except StoreFullError:
                self.count("store_full")
            except Exception as exc:  # noqa: BLE001 - counted and reported: the soak must keep going
                self.count("errors")
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"

    def write(self, rng: random.Random) -> None:
        start = rng.randrange(len(self.ids))
        chain = self.ids[start : start + rng.randint(1, 8)]
        self.store.put_many(FINGERPRINT, [(b, self.block(b)) for b in chain])
        self.count("writes", len(chain))

    def read(self, rng: random.Random) -> None:
        block_id = rng.choice(self.ids)
        layers = range(rng.randrange(NUM_LAYERS - 1), NUM_LAYERS) if rng.random() < 0.3 else None
        got = self.store.read(block_id, FINGERPRINT, layers)
        self.count("reads")
        if not isinstance(got, BlockRead):  # None: not stored (a read that may wait is never NOT_CACHED)
            return
        self.count("read_hits")
        expected = self.block(block_id)
        if layers is not None:
            self.count("layer_reads")
            offset, length = payload_range(read_header(expected), layers.start, layers.stop)
            expected = expected[: got.header_size] + expected[offset : offset + length]
        if got.data != expected:
            self.count("wrong_bytes")

    def lifecycle(self, rng: random.Random) -> None:
        some = rng.sample(self.ids, 4)
        self.store.lookup(some)
        self.count("lookups")
        action = rng.random()
        if action < 0.4:
            self.store.pin(some[:1], ttl_s=rng.uniform(0.05, 0.5))
            self.count("pins")
        elif action < 0.6:
            self.store.unpin(some)
        elif action < 0.8:
            self.store.hint(some, Hint(priority=rng.randint(0, 3)))
        else:
            self.count("deletes", self.store.delete(some[:1]))
        time.sleep(0.005)


def run(  # noqa: PLR0913 - the soak's knobs, each a CLI flag with its default
    seconds: float,
    data_dir: Path | None = None,
    dram_budget_bytes: int = 4 << 20,
    ssd_budget_bytes: int = 32 << 20,
    working_set: int = 4000,
    writers: int = 2,
    readers: int = 2,
    group_commit: bool = False,
    seed: int = 0,
) -> dict:
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {seconds} s")
    with tempfile.TemporaryDirectory(prefix="kvstore-soak-", dir=data_dir) as tmp:
        store = KVStore.open(
            tmp, dram_budget_bytes=dram_budget_bytes, ssd_budget_bytes=ssd_budget_bytes, group_commit=group_commit
        )
        load = _Load(store, working_set, seed)
        max_disk = 0
        bodies = (
            [lambda r=random.Random(seed + i): load.write(r) for i in range(writers)]
            + [lambda r=random.Random(seed + 100 + i): load.read(r) for i in range(readers)]
            + [lambda r=random.Random(seed + 200): load.lifecycle(r)]
        )
        threads = [threading.Thread(target=load.guarded, args=(body,), daemon=True) for body in bodies]
        start = time.monotonic()
        try:
            for thread in threads:
                thread.start()
            next_du = start
            while time.monotonic() - start < seconds:
                time.sleep(0.05)
                if time.monotonic() >= next_du:
                    max_disk = max(max_disk, store.disk_bytes())
                    next_du += 1.0
        finally:
            load.stop.set()
            for thread in threads:
                thread.join()
            stats = store.stats()
            store.close()
    elapsed = time.monotonic() - start
    return {
        "seconds": round(elapsed, 1),
        "working_set_bytes_approx": working_set * sum(m.payload_bytes for m in load.makers) // len(load.makers),
        "dram": {
            "budget_bytes": dram_budget_bytes,
            "max_bytes": stats.dram.peak_bytes,
            "evictions": stats.dram.evictions,
            "hits": stats.dram.hits,
        },
        "ssd": {
            "budget_bytes": ssd_budget_bytes,
            "max_bytes": stats.ssd.peak_bytes,
            "max_bytes_on_disk_sampled": max_disk,
            "evictions": stats.ssd.evictions,
            "hits": stats.ssd.hits,
        },
        "within_budget": stats.dram.peak_bytes <= dram_budget_bytes
        and stats.ssd.peak_bytes <= ssd_budget_bytes
        and max_disk <= ssd_budget_bytes,
        "ops_per_s": round(sum(load.counts[k] for k in ("writes", "reads", "lookups")) / elapsed, 1),
        **load.counts,
        "first_error": load.first_error,
    }
