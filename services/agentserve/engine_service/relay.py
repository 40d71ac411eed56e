"""Path B of DualPath: store -> a decode engine's storage NIC -> compute network -> a prefill engine.

Decode side (`RelaySender.relay`, behind Decode.RelayKV): a reader task fetches every block from
the store over the decode's snic (span `kv.path=B`, `net.link=snic`), and the sender streams each
block's bytes as read (the store holds every block as a block-format run of its own) as
layer-range chunks paced by the decode's cnic (span `kv.path=relay`, `net.link=cnic`): the store
read and the compute-network send overlap. That is DualPath's path B: the store's bytes cross the
decode side's storage NIC, whatever the decode engine holds. Neither leg waits for the engine
thread, which runs commands between decode steps: what the relay reads is imported into the pool
by a `_Keeper` on the side (so the decode keeps it for the suffix-only handoff), all the blocks
read while one import waits going in the next command, and nothing is exported.

With `hbm_first` (scheduler `relay_source=hbm-first`) the leading blocks the engine holds go from
its cache instead, exported in groups of `RELAY_RUN_BLOCKS` as one run each, and only the rest are
read. Those are pinned in the pool from the moment they are found until the relay ends: the engine
keeps stepping until they are exported, so under load an unpinned block could be evicted and the
relay would stop short.

Prefill side (`relay_load`): paces every chunk through the prefill's cnic, reassembles and verifies
each run (`PacedReceiver`) and imports it as soon as it is whole.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from functools import partial

from agentserve.common.telemetry import kv_transfer
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.layer_stream import LayerStream
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.layer_loads import RunLayers
from agentserve.fabric.chunks import DEFAULT_CHUNK_BYTES, RunAssembler, split_run
from agentserve.fabric.nic import Transfer
from agentserve.fabric.stream import PacedReceiver, receiver_latency_ms
from agentserve.kv.block_header import CorruptBlockError, read_header
from agentserve.v1 import decode_pb2, decode_pb2_grpc, fabric_pb2

log = logging.getLogger(__name__)

RELAY_RUN_BLOCKS = 16  # held blocks per exported run (hbm_first): layer-major within a run
RELAY_TIMEOUT_S = 60.0


def _export_run(engine: LLMEngine, ids: Sequence[bytes]) -> bytes | None:
    """`ids` as one run, or None if one was evicted meanwhile (the stream then ends there)."""
    if any(engine.blocks.lookup(block_id) is None for block_id in ids):
        return None
    return bytes(engine.export_blocks(list(ids)))


class RelaySender:
    """The decode engine's side of path B."""

    def __init__(self, mover: KVMover, max_chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.mover = mover
        self.max_chunk_bytes = max_chunk_bytes

    async def relay(
        self, ids: Sequence[bytes], dst: str, hbm_first: bool = False
    ) -> AsyncIterator[fabric_pb2.FabricChunk]:
        """Chunks of `ids` for the prefill engine `dst`, each read from the store; with `hbm_first`
        the leading blocks this engine holds go first from its cache, then the rest from the store."""
        mover = self.mover
        ids = list(ids)
        # Entered before the first pin: a relay cancelled while that command waits still frees it.
        with mover.engine.pinning() as pinned:

            def pin_held(engine: LLMEngine) -> int:
                held = engine.blocks.cached_prefix(ids)
                pinned.extend(engine.blocks.pin(ids[:held]))
                return held

            held = await mover.engine.call(pin_held) if hbm_first else 0
            # In sending order: runs of held blocks (their ids: exported from the pool when sent) and
            # blocks read from the store (their bytes, sent as read); None ends.
            ready: asyncio.Queue[list[bytes] | bytes | None] = asyncio.Queue()
            for start in range(0, held, RELAY_RUN_BLOCKS):
                ready.put_nowait(ids[start : min(start + RELAY_RUN_BLOCKS, held)])
            keeper = _Keeper(mover.engine)
            reader = None
            if held < len(ids):
                reader = asyncio.create_task(self._read_from_store(ids[held:], ready, keeper), name="relay-store-read")
            else:
                ready.put_nowait(None)
            try:
                with kv_transfer("relay", "cnic", mover.engine_id, dst, mover.num_layers, mover.cnic.gbps) as record:
                    header = fabric_pb2.TransferHeader(
                        transfer_id=uuid.uuid4().hex,
                        path="relay",
                        src=mover.engine_id,
                        dst_nic="cnic",
                        total_bytes=len(ids) * mover.charge.per_block,
                        sender_latency_ms=mover.cnic.latency_ms,
                    )
                    async with mover.cnic.transfer(header.total_bytes) as transfer:
                        pacer = mover.charge.run_pacer()
                        run_index = 0
                        first: fabric_pb2.TransferHeader | None = header
                        while (item := await ready.get()) is not None:
                            if isinstance(item, list):
                                run = await mover.engine.call(partial(_export_run, ids=item))
                                if run is None:  # pinned, so this is a bug, not load: say so
                                    log.warning("relay to %s stopped short: a pinned block left the pool", dst)
                                    break
                                blocks = len(item)
                            else:
                                run, blocks = item, 1  # the store holds every block as a run of its own
                            for chunk in split_run(run, self.max_chunk_bytes):
                                charged = pacer(chunk.header, len(chunk.data))
                                await transfer.pace(charged)
                                record.add(charged, blocks=0)
                                yield fabric_pb2.FabricChunk(
                                    transfer=first,
                                    run=run_index,
                                    run_header=chunk.header,
                                    offset=chunk.offset,
                                    data=bytes(chunk.data),
                                )
                                first = None
                            record.blocks += blocks
                            run_index += 1
                    record.queue_wait_s = transfer.queue_wait_s
                if reader is not None:
                    await reader  # a failed store read fails the relay: the prefill loads the rest by path A
                # Kept before the stream ends: the prefill's handoff, which asks what this engine
                # holds, comes after its load returns.
                await keeper.wait()
            finally:
                if reader is not None and not reader.done():
                    reader.cancel()
                keeper.cancel()

    async def _read_from_store(self, ids: list[bytes], ready: asyncio.Queue, keeper: _Keeper) -> None:
        """The store leg: read `ids` over this engine's snic, hand each block's bytes to the sender
        as it arrives and to the keeper. Neither waits for the engine thread."""
        mover = self.mover
        try:
            with kv_transfer(
                "B", "snic", mover.kvstore_address, mover.engine_id, mover.num_layers, mover.snic.gbps
            ) as record:
                async with mover.snic.transfer(len(ids) * mover.charge.per_block) as transfer:
                    async for block_id, data in mover.kvstore.get(mover.fingerprint, ids):
                        if read_header(data).diff is not None:
                            # A diff (`kv.block_diff`) needs its master to stand for a block: path A's
                            # load restores it, so the relay stops short here and the rest go by A.
                            break
                        charged = mover.charge.blocks(len(data))
                        await transfer.pace(charged)
                        record.add(charged)
                        ready.put_nowait(bytes(data))
                        keeper.keep(block_id, data)
                record.queue_wait_s = transfer.queue_wait_s
        finally:
            ready.put_nowait(None)


class _Keeper:
    """Imports the blocks a relay read from the store into the decode's pool, so the decode keeps
    them for the suffix-only handoff. The engine thread runs commands between decode steps, so the
    imports wait for it off the relay's way: everything read meanwhile goes in one command, and
    neither the store read nor the send waits. Keeping is best-effort: a block that finds no room
    was sent all the same, and the prefill's handoff then sends it here as well."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._pending: list[tuple[bytes, bytes]] = []
        self._task: asyncio.Task | None = None

    def keep(self, block_id: bytes, data: bytes) -> None:
        self._pending.append((block_id, data))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._import(), name="relay-keep")

    async def _import(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            await self.engine.call(partial(_keep_each, blocks=batch))

    async def wait(self) -> None:
        if self._task is not None:
            await self._task

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()  # a command already queued still runs: it only imports


def _keep_each(engine: LLMEngine, blocks: list[tuple[bytes, bytes]]) -> int:
    """Import the (id, bytes) `blocks` the pool lacks; how many. One that fails is left out (see
    `_Keeper`). Those it holds already (a shared prefix another turn here claims) cost a lookup,
    not a decode of their bytes: the engine thread runs this between decode steps."""
    kept = 0
    for block_id, data in blocks:
        if engine.blocks.lookup(block_id) is not None:
            continue
        try:
            kept += engine.import_blocks(data)
        except (RuntimeError, ValueError) as exc:  # no room, or a block the prefill refuses too
            log.debug("relay did not keep a block: %s", exc)
    return kept


async def relay_load(mover: KVMover, ids: Sequence[bytes], relay_address: str, hbm_first: bool = False) -> int:
    """The prefill engine's side of path B: receive `ids` from the decode engine at `relay_address`
    over this engine's cnic and import them; returns how many blocks arrived (may stop short).
    `hbm_first`: the relay may send the blocks it holds from its HBM (`RelaySender.relay`)."""
    if not ids:
        return 0
    async with mover.peers.calling(relay_address) as channel:
        call = decode_pb2_grpc.DecodeStub(channel).RelayKV(
            decode_pb2.RelayRequest(block_ids=list(ids), dst=mover.engine_id, hbm_first=hbm_first),
            timeout=RELAY_TIMEOUT_S,
        )
        whole: list[bytearray] = []  # runs reassembled and verified, not yet imported
        blocks = 0
        receiver: PacedReceiver | None = None
        try:
            async with AsyncExitStack() as stack:
                async for chunk in call:
                    if receiver is None:
                        transfer = await _receiving(stack, mover, chunk)
                        receiver = PacedReceiver(
                            transfer, lambda _run, buffer: whole.append(buffer), charge=mover.charge.run_pacer()
                        )
                    await receiver.add(chunk.run, chunk.run_header, chunk.offset, chunk.data)
                    if whole:
                        runs, whole[:] = list(whole), []
                        blocks += await mover.engine.call(partial(_import_runs, runs=runs))
        finally:
            call.cancel()  # no-op once the stream ended; frees the relay when we stop early
    return blocks


async def relay_by_layer(
    mover: KVMover, ids: Sequence[bytes], relay_address: str, stream: LayerStream, first: int, hbm_first: bool = False
) -> int:
    """`relay_load` for a layerwise prefill: each run's layers go into `stream` (blocks `ids` at
    index `first` on) as they complete, nothing into the engine; returns the blocks delivered whole."""
    if not ids:
        return 0
    async with mover.peers.calling(relay_address) as channel:
        call = decode_pb2_grpc.DecodeStub(channel).RelayKV(
            decode_pb2.RelayRequest(block_ids=list(ids), dst=mover.engine_id, hbm_first=hbm_first),
            timeout=RELAY_TIMEOUT_S,
        )
        blocks = 0
        transfer: Transfer | None = None
        run: tuple[RunAssembler, RunLayers] | None = None
        try:
            async with AsyncExitStack() as stack:
                pacer = mover.charge.run_pacer()
                async for chunk in call:
                    if transfer is None:
                        transfer = await _receiving(stack, mover, chunk)
                    await transfer.pace(pacer(chunk.run_header, len(chunk.data)))
                    if chunk.run_header:
                        run = (RunAssembler(chunk.run_header), RunLayers(stream, first + blocks, ids[blocks:]))
                        run[1].check(run[0].header)
                    if run is None:
                        raise CorruptBlockError(f"chunk of run {chunk.run} arrived before the run's header")
                    assembler, layers = run
                    layers.deliver(assembler.header, assembler.buffer, assembler.add(chunk.offset, chunk.data))
                    if assembler.complete:
                        blocks += assembler.header.num_blocks
                        run = None
        finally:
            call.cancel()
    return blocks


async def _receiving(stack: AsyncExitStack, mover: KVMover, chunk: fabric_pb2.FabricChunk) -> Transfer:
    """The receiving transfer a relay's first chunk declares: from here it counts in our queue depth."""
    if not chunk.HasField("transfer"):
        raise ValueError("relay stream did not start with a transfer header")
    latency_ms = receiver_latency_ms(mover.cnic, chunk.transfer)
    return await stack.enter_async_context(mover.cnic.transfer(chunk.transfer.total_bytes, latency_ms=latency_ms))


def _import_runs(engine: LLMEngine, runs: list[bytearray]) -> int:
    """Import relayed runs in one engine command; returns their blocks (new or already present)."""
    return sum(_import_run(engine, buffer) for buffer in runs)


def _import_run(engine: LLMEngine, buffer: bytearray) -> int:
    """Import one relayed run; returns its blocks (new or already present)."""
    engine.import_blocks(memoryview(buffer))  # a view, not a copy
    return read_header(buffer).num_blocks
