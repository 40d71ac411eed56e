"""The KV movements an engine makes, each inside a `kv.transfer` span:

- load (path A): KV store -> this engine, over the storage NIC
- persist: this engine -> KV store, over the storage NIC
- handoff: prefill engine -> decode engine, over the compute NIC (only what it lacks: `lacking`)

Path B (a decode engine relaying store reads to a prefill engine) lives in `relay`.

A load may meet diff blocks (a shared block's sibling stored against its master, `kv.block_diff`):
each is restored as it arrives, against its master fetched once per load, with this model's RoPE
shift, and imported as the full block it stands for. A diff the store found corrupt arrives as
missing, like any miss: the engine computes it and what follows.

The store is a cache, never a dependency: a load or persist that finds it down (`store_down`) is
not an error. A load keeps the leading blocks that arrived (the engine computes the rest: same
output, more compute); a persist is skipped (the blocks stay only in HBM). Both are counted
(`STORE_SKIPPED_BLOCKS`) and noted on the current span (`kv.store_skipped.<op>`), so the caller never
fails a turn, and the scheduler never drops an engine, for a store outage.

Blocks travel one per message in the block wire format; the engine thread does every pool access.
Every byte is paced by this engine's emulated NIC (agentserve.fabric), whose queue depth the
heartbeat reports; the receiving end of a handoff paces its own NIC (`incoming_transfer`). NICs,
spans and `Moved` count the bytes `KVCharge` charges: a real engine's bytes on the wire, an
emulated-compute engine's the target's bytes for the KV carried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
import torch
from opentelemetry import trace
from prometheus_client import Counter

from agentserve.common.channels import ChannelCache
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.telemetry import TransferRecord, kv_transfer
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.rope import inverse_frequencies
from agentserve.engine_service.kv_charge import KVCharge
from agentserve.fabric.nic import EmulatedNIC, Transfer
from agentserve.fabric.stream import paced, transfer_metadata
from agentserve.kv.block_diff import restore_block
from agentserve.kv.block_format import read_header, serialize_blocks
from agentserve.kv.rope_shift import RopeShift
from agentserve.kvstore.client import store_down
from agentserve.kvstore.sharded import ShardedKVStoreClient
from agentserve.v1 import common_pb2, decode_pb2, decode_pb2_grpc

log = logging.getLogger(__name__)

HANDOFF_TIMEOUT_S = 60.0

STORE_SKIPPED_BLOCKS = Counter(
    "agentserve_engine_store_skipped_blocks_total",
    "Blocks an engine did not load (it computed them) or did not persist because the KV store was down",
    ["op"],
)


@dataclass(frozen=True)
class Moved:
    """What one KV movement carried."""

    blocks: int = 0
    bytes: int = 0


# Serializes a block this engine holds outside its pool (a layerwise prefill's loaded prefix), or None.
HeldElsewhere = Callable[[bytes], bytes | None]


def _export_each(
    engine: LLMEngine, ids: Sequence[bytes], elsewhere: HeldElsewhere | None = None
) -> list[tuple[bytes, bytes]]:
    """Serialize blocks one by one, from the pool or else from `elsewhere`, stopping at the first
    that is in neither."""
    out = []
    for block_id in ids:
        if engine.blocks.lookup(block_id) is not None:
            out.append((block_id, bytes(engine.export_blocks([block_id]))))
        elif elsewhere is not None and (data := elsewhere(block_id)) is not None:
            out.append((block_id, data))
        else:
            break
    return out


def _import_each(engine: LLMEngine, blocks: Sequence[bytes]) -> int:
    return sum(engine.import_blocks(data) for data in blocks)


def block_wire_bytes(engine: LLMEngine) -> int:
    """Bytes of one full block in the block format, header included (all blocks are this size)."""
    config = engine.model_config
    shape = (config.num_hidden_layers, 1, engine.block_size, config.num_key_value_heads, config.head_dim)
    zeros = torch.zeros(shape, dtype=engine.dtype)
    kv_dtype = engine.config.block_kv_dtype
    return len(serialize_blocks(zeros, zeros, block_ids=[bytes(16)], fingerprint=engine.fingerprint, kv_dtype=kv_dtype))


def unshaped_nics() -> dict[str, EmulatedNIC]:
    return {"snic": EmulatedNIC("snic", 0), "cnic": EmulatedNIC("cnic", 0)}


class KVMover:
    def __init__(
        self,
        engine: AsyncEngine,
        engine_id: str,
        kvstore: ShardedKVStoreClient,
        kvstore_address: str,
        nics: Mapping[str, EmulatedNIC] | None = None,
        tls: InternalTLS | None = None,
    ):
        self.engine = engine
        self.engine_id = engine_id
        self.kvstore = kvstore
        self.kvstore_address = kvstore_address
        self.num_layers = engine.engine.model_config.num_hidden_layers
        self.fingerprint = engine.engine.fingerprint
        # declares a load's size before its bytes arrive (NIC queue depth)
        self.block_bytes = block_wire_bytes(engine.engine)
        self.charge = KVCharge.for_engine(engine.engine, self.block_bytes)  # what the NICs count
        self.shift = RopeShift(inverse_frequencies(engine.engine.model_config))  # restores diff blocks
        nics = dict(nics or unshaped_nics())
        self.snic, self.cnic = nics["snic"], nics["cnic"]
        # Peer engines (handoff, relay); one found UNAVAILABLE is forgotten, so a restart gets a fresh
        # channel. With `tls` a peer must present a certificate of the deployment's CA: an address
        # that is not a deployment engine fails the handshake and receives nothing.
        self.peers = ChannelCache(tls)

    async def load_from_store(self, ids: Sequence[bytes]) -> int:
        """Path A: fetch `ids` (a chained run) from the store into this engine; returns blocks loaded.
        With the store down, what arrived before (a leading run) is kept: the engine computes the rest."""
        if not ids:
            return 0
        datas: list[bytes] = []
        masters: dict[bytes, bytes | None] = {}
        try:
            with kv_transfer(
                "A", "snic", self.kvstore_address, self.engine_id, self.num_layers, self.snic.gbps
            ) as record:
                async with self.snic.transfer(len(ids) * self.charge.per_block) as transfer:
                    async for _, data in self.kvstore.get(self.fingerprint, list(ids)):
                        charged = self.charge.blocks(len(data))
                        await transfer.pace(charged)
                        record.add(charged)
                        diff = read_header(data).diff  # (headers are parsed once: cached by their bytes)
                        if diff is not None:
                            restored = await self._restored(data, diff.master_id, masters, transfer, record)
                            if restored is None:
                                break  # its master is gone: the engine computes from here
                            data = restored
                        datas.append(data)
                record.queue_wait_s = transfer.queue_wait_s
                await self.engine.call(lambda e: _import_each(e, datas))
            return len(datas)
        except grpc.aio.AioRpcError as exc:
            if not store_down(exc):
                raise
            self.store_skipped("load", len(ids) - len(datas), exc)
        if datas:
            await self.engine.call(lambda e: _import_each(e, datas))
        return len(datas)

    async def _restored(
        self,
        diff: bytes,
        master_id: bytes,
        masters: dict[bytes, bytes | None],
        transfer: Transfer,
        record: TransferRecord,
    ) -> bytes | None:
        """The full block a diff stands for, its master fetched (and paced) once per load; None
        when the store no longer has the master."""
        if master_id not in masters:
            found = [data async for _, data in self.kvstore.get(self.fingerprint, [master_id])]
            masters[master_id] = found[0] if found else None
            if found:
                charged = self.charge.blocks(len(found[0]))
                await transfer.pace(charged)
                record.add(charged)
        master = masters[master_id]
        return None if master is None else bytes(restore_block(master, diff, self.shift))

    async def fetch(self, ids: Sequence[bytes]) -> dict[bytes, bytes]:
        """Path A, as stored: the buffers of `ids` the store gives (it stops at the first it lacks;
        a diff stays a diff), none if the store is down. For reused KV (`reused_kv`), which is
        read back outside the prefix cache."""
        found: dict[bytes, bytes] = {}
        if not ids:
            return found
        try:
            with kv_transfer(
                "A", "snic", self.kvstore_address, self.engine_id, self.num_layers, self.snic.gbps
            ) as record:
                async with self.snic.transfer(len(ids) * self.charge.per_block) as transfer:
                    async for block_id, data in self.kvstore.get(self.fingerprint, list(ids)):
                        charged = self.charge.blocks(len(data))
                        await transfer.pace(charged)
                        record.add(charged)
                        found[bytes(block_id)] = data
                record.queue_wait_s = transfer.queue_wait_s
        except grpc.aio.AioRpcError as exc:
            if not store_down(exc):
                raise
            self.store_skipped("load", len(ids) - len(found), exc)
        return found

    async def put(self, blocks: Sequence[tuple[bytes, bytes]]) -> int:
        """Write serialized blocks (full or diff) to the store; how many (0, skipped, with the store down)."""
        if not blocks:
            return 0
        try:
            with kv_transfer(
                "persist", "snic", self.engine_id, self.kvstore_address, self.num_layers, self.snic.gbps
            ) as record:
                charged = self.charge.blocks(sum(len(data) for _, data in blocks), len(blocks))
                record.add(charged, blocks=len(blocks))
                async with self.snic.send(charged) as transfer:  # one Put message: paced as a whole
                    await self.kvstore.put(self.fingerprint, list(blocks))
                record.queue_wait_s = transfer.queue_wait_s
        except grpc.aio.AioRpcError as exc:
            if not store_down(exc):
                raise
            self.store_skipped("persist", len(blocks), exc)
            return 0
        return len(blocks)

    async def persist(self, ids: Sequence[bytes]) -> int:
        """Write resident blocks to the store; returns how many were stored (0, skipped, with the store down)."""
        if not ids:
            return 0
        blocks = await self.engine.call(lambda e: _export_each(e, ids))
        return await self.put(blocks)

    def store_skipped(self, op: str, blocks: int, exc: grpc.aio.AioRpcError) -> None:
        """Count `blocks` not loaded or not persisted (`op`) because the store is down, on the metric
        and the current span (the prefill's or the decode's)."""
        log.warning("KV store %s down (%s): %s of %d blocks skipped", self.kvstore_address, exc.code().name, op, blocks)
        STORE_SKIPPED_BLOCKS.labels(op).inc(blocks)
        trace.get_current_span().set_attribute(f"kv.store_skipped.{op}", blocks)

    async def lacking(self, decode_address: str, ids: Sequence[bytes]) -> list[bytes]:
        """Those of `ids` the decode engine at `decode_address` does not hold, in order."""
        if not ids:
            return []
        async with self.peers.calling(decode_address) as channel:
            reply = await decode_pb2_grpc.DecodeStub(channel).Lookup(
                decode_pb2.HeldBlocksRequest(block_ids=list(ids)), timeout=HANDOFF_TIMEOUT_S
            )
        if len(reply.held) != len(ids):
            raise ValueError(f"decode engine at {decode_address} answered {len(reply.held)} of {len(ids)} ids")
        return [block_id for block_id, held in zip(ids, reply.held) if not held]

    async def handoff(self, ids: Sequence[bytes], decode_address: str, elsewhere: HeldElsewhere | None = None) -> Moved:
        """Stream blocks (resident, or held `elsewhere`) to a decode engine's LoadKV; returns what was sent."""
        blocks = await self.engine.call(lambda e: _export_each(e, ids, elsewhere))
        if not blocks:
            return Moved()
        with kv_transfer("handoff", "cnic", self.engine_id, decode_address, self.num_layers, self.cnic.gbps) as record:
            charged = self.charge.blocks(sum(len(data) for _, data in blocks), len(blocks))
            record.add(charged, blocks=len(blocks))
            async with self.peers.calling(decode_address) as channel, self.cnic.transfer(charged) as transfer:
                messages = (common_pb2.KVBlock(block_id=i, data=d) for i, d in blocks)
                await decode_pb2_grpc.DecodeStub(channel).LoadKV(
                    paced(messages, transfer, lambda m: self.charge.blocks(len(m.data))),
                    metadata=transfer_metadata(transfer),
                    timeout=HANDOFF_TIMEOUT_S,
                )
            record.queue_wait_s = transfer.queue_wait_s
        return Moved(len(blocks), record.bytes)

    async def close(self) -> None:
        await self.peers.close()
