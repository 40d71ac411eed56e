"""Reading one stored block file, whole or a layer range, and verifying what was read.

A layer range of a layer-major block is one contiguous byte range, so after the header (one small
read) it costs one positioned read, and only the checksums of the layers read are checked. Errors
say what went wrong: `FingerprintMismatchError` (another model's block: kept), `LayerRangeError`
(the caller asked for layers the block does not have: kept), any other ValueError means the file
is corrupt and the store drops it.
"""

from __future__ import annotations

import os

from agentserve.common.checksum import crc32
from agentserve.kv.block_format import (
    BlockHeader,
    CorruptBlockError,
    check_fingerprint,
    header_size,
    payload_range,
    read_header,
)
from agentserve.kv.block_header import check_layers
from agentserve.kvstore.verify import verify_block

HEAD_READ = 4096  # one read covers the header of blocks up to ~60 layers; longer ones take two
PROBE_ABOVE = 64 << 10  # a nowait read longer than this first checks its last byte is cached


class LayerRangeError(ValueError):
    """The requested layer range is empty or beyond the block's layers."""


class WouldBlock(Exception):
    """A `nowait` read found the bytes not (all) in the page cache."""


# What a reader asks for: None (every layer), a range, or a slice whose stop may be open.
Layers = range | slice | None


def wants_whole(layers: Layers) -> bool:
    """True when `layers` selects every layer whatever the block's depth."""
    return layers is None or (isinstance(layers, slice) and not layers.start and layers.stop is None)


def resolve_layers(layers: Layers, header: BlockHeader) -> range:
    """`layers` as a range within the block's layers; LayerRangeError if empty or out of range."""
    if layers is None:
        return range(header.num_layers)
    if isinstance(layers, slice):
        if layers.step not in (None, 1):
            raise LayerRangeError(f"layer step must be 1, got {layers.step}")
        layers = range(layers.start or 0, header.num_layers if layers.stop is None else layers.stop)
    try:
        return check_layers(header, layers)
    except ValueError as exc:
        raise LayerRangeError(f"block {header.block_ids[0].hex()}: {exc}") from None


def read_whole(
    fd: int, size: int, block_id: bytes, expected_fingerprint: str | None, max_bytes: int, nowait: bool = False
) -> tuple[bytes | bytearray, BlockHeader]:
    """The whole `size`-byte file in one read, verified exactly as a Write verifies a new block."""
    data = pread_exact(fd, size, 0, nowait)
    return data, verify_block(block_id, data, expected_fingerprint, max(max_bytes, len(data)))


def read_head(fd: int, size: int, nowait: bool = False) -> BlockHeader:
    """The verified header of a block file (one read, two for a header over HEAD_READ bytes)."""
    head = pread_exact(fd, min(size, HEAD_READ), 0, nowait)
    hsize = header_size(head)
    if hsize > len(head):
        head = pread_exact(fd, hsize, 0, nowait)
    return read_header(head)


def read_layers(
    fd: int, size: int, block_id: bytes, expected_fingerprint: str | None, layers: Layers, nowait: bool = False
) -> tuple[bytes, int, BlockHeader, range]:
    """(header bytes + payload of `layers`, header size, header, layers): two reads, `layers` verified."""
    head = pread_exact(fd, min(size, HEAD_READ), 0, nowait)
    hsize = header_size(head)
    if hsize > len(head):
        head = pread_exact(fd, hsize, 0, nowait)
    header = read_header(head)
    if header.num_blocks != 1 or header.block_ids[0] != block_id:
        raise CorruptBlockError(f"file of block {block_id.hex()} holds another block")
    check_fingerprint(header, expected_fingerprint)
    last = header.layers[-1]
    if size != header.payload_offset + last.offset + last.length:
        raise CorruptBlockError(
            f"file is {size} bytes, its header describes {header.payload_offset + last.offset + last.length}"
        )
    layers = resolve_layers(layers, header)
    offset, length = payload_range(header, layers.start, layers.stop)
    payload = pread_exact(fd, length, offset, nowait)
    check_layer_crcs(header, payload, layers)
    return bytes(head[:hsize]) + payload, hsize, header, layers


def check_layer_crcs(header: BlockHeader, payload: bytes | bytearray | memoryview, layers: range) -> None:
    """Verify the payload bytes of `layers` (as returned by `payload_range`)."""
    view = memoryview(payload)
    base = header.layers[layers.start].offset
    for i in layers:
        extent = header.layers[i]
        start = extent.offset - base
        chunk = view[start : start + extent.length]
        if len(chunk) != extent.length:
            raise CorruptBlockError(f"layer {i} truncated", layer=i)
        if crc32(chunk) != extent.crc32:
            raise CorruptBlockError(f"layer {i} checksum mismatch", layer=i)


def _nowait_read(fd: int, buf: bytearray, offset: int) -> int:
    """Bytes read into `buf` from the page cache alone; 0 where that would wait for the disk."""
    try:
        return os.preadv(fd, [buf], offset, os.RWF_NOWAIT) if buf else 0
    except (BlockingIOError, OSError, AttributeError):  # not cached, or no preadv2 here
        return 0


def pread_exact(fd: int, length: int, offset: int, nowait: bool = False) -> bytes | bytearray:
    """Up to `length` bytes at `offset`; fewer only at end of file (verification then fails).

    With `nowait`, raises WouldBlock unless every byte is in the page cache (RWF_NOWAIT), so a
    caller on an event loop can serve warm reads in place and hand cold ones to a thread. It
    returns the bytearray it read into: copying it into bytes would cost as much as the read.
    """
    if nowait:
        # Probe the last byte first: the disk fills a file front to back, so while its end is not
        # cached the whole read would fail, after zeroing and partly filling a block-sized buffer.
        if length > PROBE_ABOVE and _nowait_read(fd, bytearray(1), offset + length - 1) < 1:
            raise WouldBlock
        buf = bytearray(length)
        if _nowait_read(fd, buf, offset) < length:
            raise WouldBlock
        return buf
    data = os.pread(fd, length, offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, length - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
