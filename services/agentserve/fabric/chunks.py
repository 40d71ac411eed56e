"""Cutting a serialized block run into layer-range chunks, and putting it back together.

A run in the block format (`agentserve.kv.block_format`) stores its payload layer-major, so the
bytes of layers [a, b) of every block in the run are one contiguous range. `split_run` cuts the
payload at layer boundaries into chunks of at most `max_chunk_bytes` (a layer larger than that is
cut within itself), in layer order, the header riding on the first chunk. `RunAssembler` writes
chunks back into a buffer byte-identical to the sender's and says how many leading layers are
complete, so a layerwise prefill can start layer 0 before the last layer has arrived.

A diff run (a shared block's sibling stored against its master, `kv.block_diff`) travels the same
way; a receiver holding the master restores it with `DiffAssembler`, each layer as it completes,
into the full block the sender's diff stands for (`assembler_for` picks the assembler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentserve.common.checksum import crc32
from agentserve.kv.block_diff import DiffRestorer
from agentserve.kv.block_header import BlockHeader, CorruptBlockError, read_header
from agentserve.kv.rope_shift import RopeShift

DEFAULT_CHUNK_BYTES = 1 << 20  # Python gRPC's per-message cost makes smaller messages slower


@dataclass(frozen=True)
class RunChunk:
    offset: int  # where `data` starts in the run buffer
    data: memoryview  # payload bytes (never the header)
    header: bytes  # the run's prefix + header on the first chunk, else b""
    layers_done: int  # leading layers complete once this chunk has arrived

    @property
    def nbytes(self) -> int:
        return len(self.header) + len(self.data)


def split_run(
    buf: bytes | bytearray | memoryview, max_chunk_bytes: int = DEFAULT_CHUNK_BYTES, max_layers: int | None = None
) -> list[RunChunk]:
    """Chunks of one run, in order and contiguous; together they carry the whole run buffer.

    `max_layers` caps the layers per chunk (1: every layer its own chunk, for layerwise loads).
    """
    if max_chunk_bytes <= 0:
        raise ValueError(f"max_chunk_bytes must be positive, got {max_chunk_bytes}")
    if max_layers is not None and max_layers <= 0:
        raise ValueError(f"max_layers must be positive, got {max_layers}")
    max_layers = max_layers or (1 << 30)
    view = memoryview(buf).cast("B")
    header = read_header(view)
    if len(view) < _bound(header, header.num_layers):
        raise CorruptBlockError(f"run truncated: {len(view)} bytes, expected {_bound(header, header.num_layers)}")
    head = bytes(view[: header.payload_offset])
    chunks: list[RunChunk] = []
    layer = 0
    while layer < header.num_layers:
        start = _bound(header, layer)
        stop = layer + 1  # widen the chunk while whole layers still fit
        while (
            stop < header.num_layers
            and stop - layer < max_layers
            and _bound(header, stop + 1) - start <= max_chunk_bytes
        ):
            stop += 1
        end = _bound(header, stop)
        for piece in range(start, end, max_chunk_bytes):
            piece_end = min(piece + max_chunk_bytes, end)
            chunks.append(
                RunChunk(
                    offset=piece,
                    data=view[piece:piece_end],
                    header=b"" if chunks else head,
                    layers_done=stop if piece_end == end else layer,
                )
            )
        layer = stop
    if not chunks:  # a payload of no bytes (a diff storing no rows) still sends its header
        end = header.payload_offset
        chunks.append(RunChunk(offset=end, data=view[end:end], header=head, layers_done=header.num_layers))
    return chunks


class RunAssembler:
    """Receives one run's chunks in order; `layers_done` grows as whole layers arrive."""

    def __init__(self, header_bytes: bytes | memoryview) -> None:
        self.header = read_header(header_bytes)
        if len(header_bytes) != self.header.payload_offset:
            raise CorruptBlockError(f"run header is {len(header_bytes)} bytes, expected {self.header.payload_offset}")
        self.buffer = bytearray(_bound(self.header, self.header.num_layers))
        self.buffer[: len(header_bytes)] = header_bytes
        self.layers_done = 0
        self._high = len(header_bytes)  # every byte below this has arrived

    @property
    def complete(self) -> bool:
        return self.layers_done == self.header.num_layers

    def add(self, offset: int, data: bytes | memoryview) -> int:
        """Write the next chunk; returns `layers_done`. Each layer's checksum is verified as it completes."""
        if offset != self._high:
            raise CorruptBlockError(f"chunk at byte {offset}, expected the next one at {self._high}")
        end = offset + len(data)
        if end > len(self.buffer):
            raise CorruptBlockError(f"chunk ends at byte {end}, past the run's {len(self.buffer)} bytes")
        self.buffer[offset:end] = data
        self._high = end
        while self.layers_done < self.header.num_layers and _layer_end(self.header, self.layers_done) <= end:
            self._verify(self.layers_done)
            self.layers_done += 1
        return self.layers_done

    def _verify(self, layer: int) -> None:
        extent = self.header.layers[layer]
        start = self.header.payload_offset + extent.offset
        if crc32(memoryview(self.buffer)[start : start + extent.length]) != extent.crc32:
            raise CorruptBlockError(f"KV run corrupt in transit: layer {layer} checksum mismatch", layer=layer)


@dataclass(frozen=True)
class Masters:
    """What a receiver restores diff runs with: the master blocks it holds (full block buffers, by
    id; None if not held) and its model's RoPE shift."""

    get: Callable[[bytes], bytes | bytearray | None]
    shift: RopeShift


class DiffAssembler:
    """Receives a diff run's chunks in order and restores the sibling layer by layer as they
    complete (each diff layer's checksum verified first), so when the last chunk lands `buffer`
    is the full block and no pass over it is left. Same interface as `RunAssembler`."""

    def __init__(self, header_bytes: bytes | memoryview, masters: Masters) -> None:
        self._run = RunAssembler(header_bytes)
        self.header = self._run.header
        info = self.header.diff
        if info is None:
            raise ValueError("DiffAssembler needs a diff run")
        master = masters.get(info.master_id)
        if master is None:
            raise ValueError(
                f"diff run {self.header.block_ids[0].hex()} references master {info.master_id.hex()}, "
                "which this receiver does not hold"
            )
        self._restorer = DiffRestorer(master, self.header, masters.shift)
        self.layers_done = 0
        self._buffer: bytearray | None = None

    @property
    def complete(self) -> bool:
        return self.layers_done == self.header.num_layers

    @property
    def buffer(self) -> bytearray:
        if self._buffer is None:
            self._buffer = self._restorer.finish()  # writes the header: every layer is already in
        return self._buffer

    def add(self, offset: int, data: bytes | memoryview) -> int:
        done = self._run.add(offset, data)  # verifies each diff layer's crc32 as it completes
        view = memoryview(self._run.buffer)
        while self.layers_done < done:
            extent = self.header.layers[self.layers_done]
            start = self.header.payload_offset + extent.offset
            self._restorer.restore_layer(self.layers_done, view[start : start + extent.length], verified=True)
            self.layers_done += 1
        return self.layers_done


def assembler_for(header_bytes: bytes | memoryview, masters: Masters | None) -> RunAssembler | DiffAssembler:
    """A `DiffAssembler` for a diff run when the receiver restores diffs (`masters`), else a
    `RunAssembler` (which hands a diff run over as the diff)."""
    if masters is not None and read_header(header_bytes).diff is not None:
        return DiffAssembler(header_bytes, masters)
    return RunAssembler(header_bytes)


def _bound(header: BlockHeader, layer: int) -> int:
    """Where layer `layer` starts in the buffer; for `num_layers`, where the buffer ends."""
    if layer < header.num_layers:
        return header.payload_offset + header.layers[layer].offset
    return _layer_end(header, header.num_layers - 1)


def _layer_end(header: BlockHeader, layer: int) -> int:
    extent = header.layers[layer]
    return header.payload_offset + extent.offset + extent.length
