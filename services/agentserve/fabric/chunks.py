"""Cutting a serialized block run into layer-range chunks, and putting it back together.

A run in the block format (`agentserve.kv.block_format`) stores its payload layer-major, so the
bytes of layers [a, b) of every block in the run are one contiguous range. `split_run` cuts the
payload at layer boundaries into chunks of at most `max_chunk_bytes` (a layer larger than that is
cut within itself), in layer order, the header riding on the first chunk. `RunAssembler` writes
chunks back into a buffer byte-identical to the sender's and says how many leading layers are
complete, so a layerwise prefill can start layer 0 before the last layer has arrived.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.common.checksum import crc32
from agentserve.kv.block_header import BlockHeader, CorruptBlockError, read_header

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


def _bound(header: BlockHeader, layer: int) -> int:
    """Where layer `layer` starts in the buffer; for `num_layers`, where the buffer ends."""
    if layer < header.num_layers:
        return header.payload_offset + header.layers[layer].offset
    return _layer_end(header, header.num_layers - 1)


def _layer_end(header: BlockHeader, layer: int) -> int:
    extent = header.layers[layer]
    return header.payload_offset + extent.offset + extent.length
