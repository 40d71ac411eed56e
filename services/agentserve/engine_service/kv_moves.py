"""The KV movements an engine makes, each inside a `kv.transfer` span:

- load (path A): KV store -> this engine, over the storage NIC
- persist: this engine -> KV store, over the storage NIC
- handoff: prefill engine -> decode engine, over the compute NIC

Blocks travel one per message in the block wire format; the engine thread does every pool access.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from agentserve.common.server import GRPC_OPTIONS
from agentserve.common.telemetry import kv_transfer, outgoing_metadata
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.kvstore.client import KVStoreClient
from agentserve.v1 import common_pb2, decode_pb2_grpc


def _export_each(engine: LLMEngine, ids: Sequence[bytes]) -> list[tuple[bytes, bytes]]:
    """Serialize resident blocks one by one, stopping at the first that is no longer resident."""
    out = []
    for block_id in ids:
        if engine.blocks.lookup(block_id) is None:
            break
        out.append((block_id, bytes(engine.export_blocks([block_id]))))
    return out


def _import_each(engine: LLMEngine, blocks: Sequence[bytes]) -> int:
    return sum(engine.import_blocks(data) for data in blocks)


class KVMover:
    def __init__(self, engine: AsyncEngine, engine_id: str, kvstore: KVStoreClient, kvstore_address: str):
        self.engine = engine
        self.engine_id = engine_id
        self.kvstore = kvstore
        self.kvstore_address = kvstore_address
        self.num_layers = engine.engine.model_config.num_hidden_layers
        self.fingerprint = engine.engine.fingerprint
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def load_from_store(self, ids: Sequence[bytes]) -> int:
        """Path A: fetch `ids` (a chained run) from the store into this engine; returns blocks loaded."""
        if not ids:
            return 0
        with kv_transfer("A", "snic", self.kvstore_address, self.engine_id, self.num_layers) as record:
            datas = []
            async for _, data in self.kvstore.get(self.fingerprint, list(ids)):
                datas.append(data)
                record.add(len(data))
            await self.engine.call(lambda e: _import_each(e, datas))
        return len(datas)

    async def persist(self, ids: Sequence[bytes]) -> int:
        """Write resident blocks to the store; returns how many were sent."""
        if not ids:
            return 0
        blocks = await self.engine.call(lambda e: _export_each(e, ids))
        if not blocks:
            return 0
        with kv_transfer("persist", "snic", self.engine_id, self.kvstore_address, self.num_layers) as record:
            for _, data in blocks:
                record.add(len(data))
            await self.kvstore.put(self.fingerprint, blocks)
        return len(blocks)

    async def handoff(self, ids: Sequence[bytes], decode_address: str) -> int:
        """Stream resident blocks to a decode engine's LoadKV; returns how many were sent."""
        blocks = await self.engine.call(lambda e: _export_each(e, ids))
        if not blocks:
            return 0
        with kv_transfer("handoff", "cnic", self.engine_id, decode_address, self.num_layers) as record:
            for _, data in blocks:
                record.add(len(data))
            stub = decode_pb2_grpc.DecodeStub(self._channel(decode_address))
            messages = (common_pb2.KVBlock(block_id=i, data=d) for i, d in blocks)
            await stub.LoadKV(messages, metadata=outgoing_metadata(), timeout=60)
        return len(blocks)

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        return self._channels[address]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
