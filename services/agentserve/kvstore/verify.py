"""What the store accepts: one complete, intact block in the agentserve block format.

The same check runs on the way in (a Put is rejected before anything touches disk) and on the way
out (a stored file that no longer passes it is corrupt). Checking here rather than trusting the
sender is what lets the store promise that every acknowledged block decodes.
"""

from __future__ import annotations

from agentserve.common.checksum import crc32
from agentserve.kv.block_format import BlockHeader, CorruptBlockError, check_fingerprint, read_header
from agentserve.kv.block_hash import check_block_id


def verify_block(
    block_id: bytes, data: bytes | bytearray | memoryview, expected_fingerprint: str | None, max_bytes: int
) -> BlockHeader:
    """Return the header of `data` if it is exactly one intact block with id `block_id`.

    Raises ValueError naming the reason: FingerprintMismatchError for another model's block,
    CorruptBlockError for a checksum mismatch or a truncated buffer, plain ValueError otherwise.
    """
    check_block_id(block_id)
    view = memoryview(data).cast("B")
    if len(view) > max_bytes:
        raise ValueError(f"block is {len(view)} bytes, over the {max_bytes}-byte limit")
    header = read_header(view)
    if header.num_blocks != 1:
        raise ValueError(f"a stored block must hold exactly 1 block, this buffer holds {header.num_blocks}")
    if header.block_ids[0] != bytes(block_id):
        raise ValueError(
            f"block id {bytes(block_id).hex()} does not match the id in its header {header.block_ids[0].hex()}"
        )
    check_fingerprint(header, expected_fingerprint)
    last = header.layers[-1]
    size = header.payload_offset + last.offset + last.length
    if len(view) < size:
        raise CorruptBlockError(f"block truncated: {len(view)} bytes, its header describes {size}")
    if len(view) > size:
        # Trailing bytes would be stored and served as if they were part of the block.
        raise CorruptBlockError(f"block has {len(view) - size} trailing bytes after the {size} its header describes")
    for i, extent in enumerate(header.layers):
        start = header.payload_offset + extent.offset
        if crc32(view[start : start + extent.length]) != extent.crc32:
            raise CorruptBlockError(f"layer {i} checksum mismatch", layer=i)
    return header
