"""`agentserve bench kvstore-trace`: a Mooncake trace's block ids replayed through the real tiered
store (no model), its hit ratio next to an exact in-memory LRU of the same capacity.

Every request looks up its chained block ids, reads the cached prefix and writes the rest, the way
a prefill engine uses the store. Blocks are small synthetic ones of one size, so a capacity in
blocks is an SSD budget of capacity x block size, and the store's LRU must match the reference's.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from agentserve.bench.micro.kvstore.blocks import BlockMaker, block_id_for
from agentserve.kvstore.store import KVStore

MOONCAKE_BLOCK_TOKENS = 512
FINGERPRINT = "agentserve.bench.kvstore-trace"
BLOCK_PAYLOAD_BYTES = 256


def trace_block_keys(path: Path, block_tokens: int) -> Iterator[list[tuple[int, int]]]:
    """Per request, the keys of its `block_tokens`-token blocks: (hash id, part of it)."""
    if block_tokens <= 0 or MOONCAKE_BLOCK_TOKENS % block_tokens:
        raise ValueError(
            f"the trace's hash ids cover {MOONCAKE_BLOCK_TOKENS}-token blocks; "
            f"--block-tokens must divide {MOONCAKE_BLOCK_TOKENS}, got {block_tokens}"
        )
    parts = MOONCAKE_BLOCK_TOKENS // block_tokens
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                hash_ids, input_length = request["hash_ids"], int(request["input_length"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{line_no}: not a Mooncake trace line ({exc})") from None
            count = min(len(hash_ids) * parts, -(-input_length // block_tokens)) if parts > 1 else len(hash_ids)
            yield [(hash_ids[i // parts], i % parts) for i in range(count)]


def lru_reference(requests: list[list[tuple[int, int]]], capacity: int) -> float:
    """Exact LRU of `capacity` blocks: the share of block accesses that hit."""
    cache: OrderedDict[tuple[int, int], None] = OrderedDict()
    hits = total = 0
    for keys in requests:
        for key in keys:
            total += 1
            if key in cache:
                hits += 1
                cache.move_to_end(key)
            else:
                cache[key] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hits / max(total, 1)


def replay(
    requests: list[list[tuple[int, int]]], capacity: int, data_dir: Path, fsync: bool, dram_fraction: float
) -> dict:
    maker = BlockMaker(FINGERPRINT, BLOCK_PAYLOAD_BYTES, num_layers=1)
    block_bytes = len(maker.make(block_id_for(0)))
    ssd_budget = capacity * block_bytes
    store = KVStore.open(
        data_dir, dram_budget_bytes=int(dram_fraction * ssd_budget), ssd_budget_bytes=ssd_budget, fsync=fsync
    )
    ids: dict[tuple[int, int], bytes] = {}
    prefix_hits = block_hits = total = 0
    start = time.perf_counter()
    try:
        for keys in requests:
            block_ids = [ids.get(k) or ids.setdefault(k, block_id_for(k)) for k in keys]
            found = store.lookup(block_ids)
            total += len(block_ids)
            prefix_hits += found.prefix_blocks
            block_hits += sum(1 for t in found.tiers if t)
            for block_id in block_ids[: found.prefix_blocks]:
                if store.read(block_id, FINGERPRINT) is None:
                    raise RuntimeError(f"block {block_id.hex()} looked up as stored but did not read")
            store.put_many(FINGERPRINT, [(b, maker.make(b)) for b in block_ids[found.prefix_blocks :]])
        stats = store.stats()
    finally:
        store.close()
    return {
        "hit_ratio": round(prefix_hits / max(total, 1), 4),
        "block_hit_ratio": round(block_hits / max(total, 1), 4),
        "blocks_accessed": total,
        "block_bytes": block_bytes,
        "ssd_budget_bytes": ssd_budget,
        "ssd_max_blocks_seen": stats.ssd.blocks,
        "dram_hits": stats.dram.hits,
        "ssd_hits": stats.ssd.hits,
        "ssd_evictions": stats.ssd.evictions,
        "replay_s": round(time.perf_counter() - start, 1),
    }


def run(
    trace: Path,
    block_tokens: int,
    capacities: list[int],
    data_dir: Path | None = None,
    fsync: bool = False,
    dram_fraction: float = 0.25,
) -> dict:
    if not capacities or min(capacities) <= 0:
        raise ValueError(f"capacities must be positive block counts, got {capacities}")
    if not 0 <= dram_fraction <= 1:
        raise ValueError(f"dram_fraction must be in [0, 1], got {dram_fraction}")
    requests = list(trace_block_keys(trace, block_tokens))
    runs = []
    for capacity in capacities:
        with tempfile.TemporaryDirectory(prefix="kvstore-trace-", dir=data_dir) as tmp:
            result = {"capacity_blocks": capacity, **replay(requests, capacity, Path(tmp), fsync, dram_fraction)}
        result["lru_reference_hit_ratio"] = round(lru_reference(requests, capacity), 4)
        result["difference"] = round(abs(result["hit_ratio"] - result["lru_reference_hit_ratio"]), 4)
        runs.append(result)
    header = {"trace": str(trace), "requests": len(requests), "block_tokens": block_tokens, "fsync": fsync}
    return {**header, **runs[0]} if len(runs) == 1 else {**header, "runs": runs}
