"""What a diff block's header says about its payload: the master it is read against and its rows.

A *diff* block stores one sibling of a shared block (TokenDance, issue 16) against the block's
*master* (a full block stored once, its keys at a recorded canonical position): the sibling is
the master with keys re-rotated by `position_offset`, except the `rows` of each layer that differ
(tokens recomputed in place). Only those rows are stored; re-rotation costs no bytes.

Payload, layer-major like a full block, each layer on a 64-byte boundary; a layer without rows
takes no bytes. How a layer's rows are written is the header's `codec` (`diff_codec`): `rows`, the
K rows then the V rows (each section on a 64-byte boundary, rows in `rows[layer]` order), so a
layer's length follows from its row count; or `xor-deflate`, a lossless delta against the
shifted master whose length only the header's layer extents say. Each layer keeps its own crc32,
so a receiver verifies (and restores) each layer as it arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64
ROWS = "rows"  # K rows, then V rows (each section on a 64-byte boundary), raw
XOR_DEFLATE = "xor-deflate"  # deflate(byte planes of (K rows ^ predicted K rows | V rows ^ master V rows))
DIFF_CODECS = (ROWS, XOR_DEFLATE)


@dataclass(frozen=True)
class DiffInfo:
    master_id: bytes
    position_offset: int  # the sibling's first position minus the master's
    rows: tuple[tuple[int, ...], ...]  # per layer: block-relative token rows stored, increasing
    codec: str = ROWS

    def check(self, num_layers: int, block_size: int) -> None:
        """ValueError naming the fault unless rows fit a block of this shape."""
        if len(self.rows) != num_layers:
            raise ValueError(f"diff rows cover {len(self.rows)} layers, the block has {num_layers}")
        for layer, rows in enumerate(self.rows):
            if any(not isinstance(r, int) or not 0 <= r < block_size for r in rows):
                raise ValueError(f"diff rows of layer {layer} must lie in [0, {block_size}), got {list(rows)}")
            if any(a >= b for a, b in zip(rows, rows[1:], strict=False)):
                raise ValueError(f"diff rows of layer {layer} must be strictly increasing, got {list(rows)}")

    @property
    def stored_rows(self) -> int:
        return sum(len(rows) for rows in self.rows)

    def to_doc(self) -> dict:
        doc = {"master": self.master_id.hex(), "position_offset": self.position_offset, "rows": self.rows}
        if self.codec != ROWS:  # a `rows` diff's header stays what it was before codecs existed
            doc["codec"] = self.codec
        return doc

    @classmethod
    def from_doc(cls, doc: dict) -> DiffInfo:
        offset = doc["position_offset"]
        if not isinstance(offset, int):
            raise ValueError(f"position_offset must be an integer, got {offset!r}")
        codec = doc.get("codec", ROWS)
        if codec not in DIFF_CODECS:
            raise ValueError(f"diff codec must be one of {', '.join(DIFF_CODECS)}, got {codec!r}")
        return cls(bytes.fromhex(doc["master"]), offset, tuple(tuple(rows) for rows in doc["rows"]), codec)


@dataclass(frozen=True)
class DiffSections:
    """Byte offsets within one diff layer: K rows at 0, V rows at `v`."""

    v: int
    length: int


def diff_sections(num_rows: int, row_bytes: int) -> DiffSections:
    if num_rows == 0:
        return DiffSections(0, 0)
    side = num_rows * row_bytes
    return DiffSections(v=_align(side), length=_align(side) + side)


def diff_extents(info: DiffInfo, row_bytes: int) -> list[tuple[int, int]]:
    """(offset, length) of each layer's bytes from payload start, for a `rows` diff."""
    return packed_extents([diff_sections(len(rows), row_bytes).length for rows in info.rows])


def packed_extents(lengths: list[int]) -> list[tuple[int, int]]:
    """(offset, length) of layers of these lengths, each on a 64-byte boundary after the last."""
    extents, offset = [], 0
    for length in lengths:
        extents.append((offset, length))
        offset = _align(offset + length)
    return extents


def check_extents(info: DiffInfo, row_bytes: int, extents: list[tuple[int, int]]) -> None:
    """ValueError unless a header's layer extents (offset, length) are this diff's layout: for
    `rows` they follow from the row counts; a coded layer holds some bytes exactly when it has
    rows, and layers are packed as `packed_extents` packs them."""
    if info.codec == ROWS:
        expected = diff_extents(info, row_bytes)
    else:
        lengths = [length for _, length in extents]
        if any((length > 0) != bool(rows) for rows, length in zip(info.rows, lengths, strict=True)):
            raise ValueError("a coded diff layer must hold bytes exactly when it has rows")
        expected = packed_extents(lengths)
    if extents != expected:
        raise ValueError("layer extents do not match the layout implied by the shape")


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
