"""KV runs over a paced gRPC stream: the sending side, the receiving side, and the `Fabric` service.

The sender paces every chunk through its own NIC before handing it to gRPC; the receiver paces
every chunk through its NIC before reading the next one, so whichever NIC is slower (or busier)
sets the rate and back-pressure reaches the sender through HTTP/2 flow control. Latency is paid
once per transfer and once only: the sender pays its NIC's, the receiver whatever its own NIC's
latency exceeds that by.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import NoReturn, TypeVar

import grpc

from agentserve.common.channels import open_channel
from agentserve.fabric.chunks import DEFAULT_CHUNK_BYTES, DiffAssembler, Masters, RunAssembler, assembler_for, split_run
from agentserve.fabric.malloc import keep_freed_buffers
from agentserve.fabric.nic import EmulatedNIC, Transfer
from agentserve.fabric.wire import Chunk, decode_chunk, encode_chunk
from agentserve.kv.block_header import CorruptBlockError
from agentserve.v1 import fabric_pb2

SERVICE = "agentserve.v1.Fabric"
TRANSFER_METHOD = f"/{SERVICE}/Transfer"

RunBuffer = bytes | bytearray | memoryview
T = TypeVar("T")

# For streams of other services (KVStore.Get, Decode.LoadKV) that carry no `TransferHeader`: the
# sender declares the same two facts in gRPC metadata.
TOTAL_BYTES_KEY = "agentserve-kv-bytes"
SENDER_LATENCY_KEY = "agentserve-sender-latency-ms"


def transfer_metadata(transfer: Transfer) -> list[tuple[str, str]]:
    """Metadata a sender adds to a KV stream so the receiver can queue and pace it (`incoming_transfer`)."""
    return [(TOTAL_BYTES_KEY, str(transfer.expected_bytes)), (SENDER_LATENCY_KEY, repr(transfer.latency_s * 1000))]


def incoming_transfer(nic: EmulatedNIC, context: grpc.aio.ServicerContext) -> Transfer:
    """The receiving side's transfer for a KV stream whose sender sent `transfer_metadata`."""
    meta = dict(context.invocation_metadata() or ())
    try:
        total = int(meta.get(TOTAL_BYTES_KEY, 0))
        sender_latency_ms = float(meta.get(SENDER_LATENCY_KEY, 0.0))
    except ValueError:
        total, sender_latency_ms = 0, 0.0
    header = fabric_pb2.TransferHeader(total_bytes=max(total, 0), sender_latency_ms=sender_latency_ms)
    return nic.transfer(header.total_bytes, latency_ms=receiver_latency_ms(nic, header))


async def paced(messages: Iterable[T], transfer: Transfer, size: Callable[[T], int]) -> AsyncIterator[T]:
    """Yield each message once `transfer` lets its `size(message)` bytes go (a request stream)."""
    for message in messages:
        await transfer.pace(size(message))
        yield message


def run_bytes(
    runs: Sequence[RunBuffer], max_chunk_bytes: int = DEFAULT_CHUNK_BYTES, max_layers: int | None = None
) -> int:
    """Bytes `paced_chunks` will pace for `runs` (headers included): a transfer's `expected_bytes`."""
    return sum(chunk.nbytes for run in runs for chunk in split_run(run, max_chunk_bytes, max_layers))


async def paced_chunks(
    runs: Sequence[RunBuffer],
    transfer: Transfer,
    header: fabric_pb2.TransferHeader,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_layers: int | None = None,
) -> AsyncIterator[bytes]:
    """The request stream of one `Fabric.Transfer` (serialized `FabricChunk`s, see `wire`): each
    chunk is yielded once `transfer` lets it go; the first carries `header`."""
    first: fabric_pb2.TransferHeader | None = header
    for index, run in enumerate(runs):
        for chunk in split_run(run, max_chunk_bytes, max_layers):
            await transfer.pace(chunk.nbytes)
            yield encode_chunk(first, index, chunk.header, chunk.offset, chunk.data)
            first = None


def receiver_latency_ms(nic: EmulatedNIC, header: fabric_pb2.TransferHeader) -> float:
    """What the receiver still owes: the link's latency is the larger end's, and the sender paid its own."""
    return max(0.0, nic.latency_ms - header.sender_latency_ms)


class PacedReceiver:
    """The receiving end of one transfer: paces chunks through `transfer`, optionally reassembles runs."""

    def __init__(
        self,
        transfer: Transfer,
        on_run: Callable[[int, bytearray], None] | None = None,
        charge: Callable[[bytes | memoryview, int], int] | None = None,
        masters: Masters | None = None,
    ) -> None:
        self.transfer = transfer
        self.on_run = on_run  # given: runs are reassembled, verified and handed over as they complete
        self.masters = masters  # given (with on_run): diff runs are restored against them as they arrive
        # (run header or b"", payload bytes) -> bytes the NIC counts; default: header + payload
        self.charge = charge
        self.runs = 0
        self._assembler: RunAssembler | DiffAssembler | None = None

    async def add(self, run: int, run_header: bytes | memoryview, offset: int, data: bytes | memoryview) -> None:
        charge = self.charge
        await self.transfer.pace(charge(run_header, len(data)) if charge else len(run_header) + len(data))
        if run_header:
            self.runs += 1
            if self.on_run is not None:
                self._assembler = assembler_for(run_header, self.masters)
        if self.on_run is None:
            return
        if self._assembler is None:
            raise CorruptBlockError(f"chunk of run {run} arrived before the run's header")
        self._assembler.add(offset, data)
        if self._assembler.complete:
            self.on_run(run, self._assembler.buffer)
            self._assembler = None

    def summary(self) -> fabric_pb2.TransferSummary:
        """Call after the transfer closed; elapsed runs from the first chunk's arrival to the end."""
        t = self.transfer
        elapsed = t.elapsed_s
        return fabric_pb2.TransferSummary(
            bytes=t.bytes,
            chunks=t.chunks,
            runs=self.runs,
            elapsed_s=elapsed,
            queue_wait_s=t.queue_wait_s,
            achieved_gbps=t.bytes * 8 / elapsed / 1e9 if elapsed > 0 else 0.0,
        )


def add_fabric_to_server(servicer: FabricServicer, server: grpc.aio.Server) -> str:
    """Register `servicer` with the zero-copy chunk decoder (`wire.decode_chunk`); returns the service name."""
    handler = grpc.stream_unary_rpc_method_handler(
        servicer.Transfer,
        request_deserializer=decode_chunk,
        response_serializer=fabric_pb2.TransferSummary.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Transfer": handler}),))
    return SERVICE


class FabricServicer:
    """Receives transfers on this process's NICs (by name); translates chunks for `PacedReceiver`.
    Register it with `add_fabric_to_server` (requests arrive as `wire.Chunk`)."""

    def __init__(
        self,
        nics: Mapping[str, EmulatedNIC],
        on_run: Callable[[fabric_pb2.TransferHeader, int, bytearray], None] | None = None,
        masters: Masters | None = None,
    ) -> None:
        self.nics = dict(nics)
        self.on_run = on_run
        self.masters = masters  # diff runs are restored against these as they arrive (see PacedReceiver)
        keep_freed_buffers()  # every chunk received is a fresh chunk-sized buffer

    async def Transfer(
        self, request_iterator: AsyncIterator[Chunk], context: grpc.aio.ServicerContext
    ) -> fabric_pb2.TransferSummary:
        messages = aiter(request_iterator)
        first = await anext(messages, None)
        if first is None or first.transfer is None:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "first chunk must carry the transfer header")
        header = first.transfer
        nic = self.nics.get(header.dst_nic)
        if nic is None:
            await _abort(context, grpc.StatusCode.NOT_FOUND, f"no receiving NIC {header.dst_nic!r}")
        deliver = self.on_run
        on_run = None if deliver is None else (lambda run, buf: deliver(header, run, buf))
        async with nic.transfer(header.total_bytes, latency_ms=receiver_latency_ms(nic, header)) as transfer:
            receiver = PacedReceiver(transfer, on_run, masters=self.masters)
            try:
                await receiver.add(first.run, first.run_header, first.offset, first.data)
                async for chunk in messages:
                    await receiver.add(chunk.run, chunk.run_header, chunk.offset, chunk.data)
            except ValueError as exc:  # CorruptBlockError included
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return receiver.summary()


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("ServicerContext.abort returned")  # it raises; this tells the type checker


class FabricClient:
    """Sends KV runs to a `Fabric` server. The channel is made on first use, in the caller's loop."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel: grpc.aio.Channel | None = None
        keep_freed_buffers()  # every chunk sent is serialized into a fresh chunk-sized buffer

    async def send(
        self,
        runs: Sequence[RunBuffer],
        nic: EmulatedNIC,
        dst_nic: str,
        *,
        path: str = "bench",
        src: str = "",
        max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_layers: int | None = None,
        timeout_s: float | None = None,
    ) -> tuple[fabric_pb2.TransferSummary, Transfer]:
        """Stream `runs` paced by `nic`; returns the receiver's summary and the sender's transfer."""
        if self._channel is None:
            self._channel = open_channel(self.address)
        # requests are already serialized by `paced_chunks`
        transfer_call = self._channel.stream_unary(
            TRANSFER_METHOD, request_serializer=None, response_deserializer=fabric_pb2.TransferSummary.FromString
        )
        total = run_bytes(runs, max_chunk_bytes, max_layers)
        header = fabric_pb2.TransferHeader(
            transfer_id=uuid.uuid4().hex,
            path=path,
            src=src,
            dst_nic=dst_nic,
            total_bytes=total,
            sender_latency_ms=nic.latency_ms,
        )
        async with nic.transfer(total) as transfer:
            summary = await transfer_call(
                paced_chunks(runs, transfer, header, max_chunk_bytes, max_layers), timeout=timeout_s
            )
        return summary, transfer

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
