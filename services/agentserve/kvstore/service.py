"""The kvstore as a service in the shared server skeleton."""

from __future__ import annotations

import asyncio
import logging
import os

import grpc
import torch

from agentserve.common.server import Service, ServerSettings
from agentserve.kv.block_format import serialize_blocks
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kvstore.config import KVStoreConfig
from agentserve.kvstore.metrics import KVStoreMetrics
from agentserve.kvstore.servicer import KVStoreServicer
from agentserve.kvstore.store import BlockStore
from agentserve.v1 import kvstore_pb2, kvstore_pb2_grpc

log = logging.getLogger(__name__)

# No model has this fingerprint, so the warm-up block can never be served to an engine.
WARMUP_FINGERPRINT = "agentserve.kvstore.warmup"


class KVStoreService(Service):
    def __init__(self, config: KVStoreConfig) -> None:
        self.config = config
        # Scanning the data dir happens here, before the port is bound: until the index is complete
        # no client can see a partial view of what is stored.
        self.store = BlockStore(config.data_dir, fsync=config.fsync, max_block_bytes=config.max_block_bytes)
        self.metrics = KVStoreMetrics(self.store)

    def settings(self) -> ServerSettings:
        c = self.config
        return ServerSettings(name="kvstore", host=c.host, grpc_port=c.grpc_port, metrics_port=c.metrics_port)

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        kvstore_pb2_grpc.add_KVStoreServicer_to_server(KVStoreServicer(self.store, self.metrics), server)
        return [kvstore_pb2.DESCRIPTOR.services_by_name["KVStore"].full_name]

    async def warmup(self) -> None:
        await asyncio.to_thread(round_trip, self.store)

    async def stop(self) -> None:
        self.store.close()


def round_trip(store: BlockStore) -> None:
    """Durably write, read back and delete one tiny block: proves the disk path works end to end."""
    block_id = os.urandom(BLOCK_ID_BYTES)  # random, so it cannot shadow a real block
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 1, 1, 16, 1, 8, generator=gen)
    data = bytes(serialize_blocks(k, v, [block_id], WARMUP_FINGERPRINT))
    try:
        if not store.put(block_id, data, WARMUP_FINGERPRINT):
            raise RuntimeError("warm-up block unexpectedly already stored")
        if store.get(block_id, WARMUP_FINGERPRINT) != data:
            raise RuntimeError(f"warm-up block did not read back intact from {store.root}")
    finally:
        store.delete(block_id)
    log.info("warm-up round trip through %s ok", store.root)
