"""The kvstore as a service in the shared server skeleton."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import grpc
import torch

from agentserve.common.server import Service
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kvstore import wire
from agentserve.kvstore.config import KVStoreConfig
from agentserve.kvstore.metrics import KVStoreMetrics
from agentserve.kvstore.servicer import KVStoreServicer
from agentserve.kvstore.store import KVStore
from agentserve.v1 import kvstore_pb2

log = logging.getLogger(__name__)

# No model has this fingerprint, so the warm-up block can never be served to an engine.
WARMUP_FINGERPRINT = "agentserve.kvstore.warmup"
MAX_INSTANCES = 64


class KVStoreService(Service):
    def __init__(self, config: KVStoreConfig) -> None:
        self.config = config
        # Scanning the data dir happens here, before the port is bound: until the index is complete
        # no client can see a partial view of what is stored.
        self.store = open_store(config)
        self.metrics = KVStoreMetrics(self.store)

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        wire.add_to_server(KVStoreServicer(self.store, self.metrics), server)
        return [kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name]

    async def warmup(self) -> None:
        await asyncio.to_thread(round_trip, self.store)

    async def stop(self) -> None:
        self.store.close()


def open_store(config: KVStoreConfig) -> KVStore:
    def open_at(data_dir: Path) -> KVStore:
        return KVStore.open(
            data_dir,
            dram_budget_bytes=config.dram_budget_bytes,
            ssd_budget_bytes=config.ssd_budget_bytes,
            fsync=config.fsync,
            group_commit=config.group_commit,
            max_block_bytes=config.max_block_bytes,
            eviction_policy=config.eviction_policy,
        )

    if not config.claim_instance_dir:
        return open_at(Path(config.data_dir))
    for n in range(MAX_INSTANCES):
        data_dir = Path(config.data_dir) / f"instance-{n}"
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            store = open_at(data_dir)
        except RuntimeError:  # another instance holds this dir's lock
            continue
        log.info("claimed %s", data_dir)
        return store
    raise RuntimeError(f"all {MAX_INSTANCES} instance dirs under {config.data_dir} are in use")


def round_trip(store: KVStore) -> None:
    """Durably write, read back and delete one tiny block: proves the disk path works end to end."""
    block_id = os.urandom(BLOCK_ID_BYTES)  # random, so it cannot shadow a real block
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 1, 1, 16, 1, 8, generator=gen)
    data = bytes(serialize_blocks(k, v, [block_id], WARMUP_FINGERPRINT))
    try:
        if not store.put(block_id, data, WARMUP_FINGERPRINT):
            raise RuntimeError("warm-up block unexpectedly already stored")
        if store.ssd.get(block_id, WARMUP_FINGERPRINT) != data:  # from disk, not the DRAM copy
            raise RuntimeError(f"warm-up block did not read back intact from {store.ssd.root}")
    finally:
        store.delete([block_id])
    log.info("warm-up round trip through %s ok", store.ssd.root)
