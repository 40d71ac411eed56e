"""Sibling caches of a shared block as block-sparse diffs against one master (TokenDance, issue 16).

`serialize_diff` writes a sibling as a diff block (format in `diff_layout`): for each layer, the
token rows where the sibling differs from its master shifted by the position offset
(`RopeShift`), K and V; `DiffRestorer` turns master + diff back into the sibling as a full
block, one layer at a time, so a receiver restores each layer as its bytes arrive
(`fabric.chunks.DiffAssembler`) and never makes a second pass over the block.

The diff is exact: rows are chosen by comparing bits, so a restored sibling is byte-identical to
the one written whatever the engine recomputed (a row the engine shifted another way is simply
stored too). The rows are written raw or, with `codec="xor-deflate"`, as a lossless delta against
the shifted master (`diff_codec`).
"""

from __future__ import annotations

import torch

from agentserve.common.checksum import crc32
from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_header import (
    BlockHeader,
    CorruptBlockError,
    LayerExtent,
    dtype_name,
    encode_header,
    header_bound,
    read_header,
)
from agentserve.kv.diff_codec import decode_delta, encode_delta
from agentserve.kv.diff_layout import DIFF_CODECS, ROWS, DiffInfo, diff_sections, packed_extents
from agentserve.kv.rope_shift import RopeShift

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32}


def serialize_diff(  # noqa: PLR0913 - four tensors and the diff header's fields, keyword-only
    master_k: torch.Tensor,
    master_v: torch.Tensor,
    sibling_k: torch.Tensor,
    sibling_v: torch.Tensor,
    *,
    block_id: bytes,
    master_id: bytes,
    fingerprint: str,
    position_offset: int,
    shift: RopeShift,
    codec: str = ROWS,
) -> bytearray:
    """The diff block of a sibling; every tensor is one block, [num_layers, block_size, heads, head_dim].
    `codec` (`diff_codec`): how the differing rows are written, raw or as a lossless delta."""
    if codec not in DIFF_CODECS:
        raise ValueError(f"codec must be one of {', '.join(DIFF_CODECS)}, got {codec!r}")
    tensors = [t.detach().cpu() for t in (master_k, master_v, sibling_k, sibling_v)]
    master_k, master_v, sibling_k, sibling_v = tensors
    if master_k.dim() != 4 or any(t.shape != master_k.shape or t.dtype != master_k.dtype for t in tensors):
        raise ValueError(
            "master and sibling K/V must share one shape [num_layers, block_size, num_kv_heads, head_dim] and dtype"
        )
    num_layers, block_size, num_kv_heads, head_dim = master_k.shape
    predicted = shift.shift(master_k, position_offset)
    differs = _differs(predicted, sibling_k) | _differs(master_v, sibling_v)  # [num_layers, block_size]
    rows = [tuple(int(r) for r in layer.nonzero().flatten()) for layer in differs]
    info = DiffInfo(bytes(master_id), position_offset, tuple(rows), codec)
    fields = {
        "fingerprint": fingerprint,
        "dtype": dtype_name(master_k.dtype),
        "kv_dtype": "native",
        "num_layers": num_layers,
        "num_blocks": 1,
        "block_size": block_size,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "block_ids": [bytes(block_id).hex()],
        "diff": info.to_doc(),
    }
    row_bytes = num_kv_heads * head_dim * master_k.dtype.itemsize
    layers = []
    for layer, layer_rows in enumerate(rows):
        index = torch.tensor(layer_rows, dtype=torch.long)
        k_rows, v_rows = sibling_k[layer].index_select(0, index), sibling_v[layer].index_select(0, index)
        if codec == ROWS:
            layers.append(_raw_rows(k_rows, v_rows, row_bytes))
        elif not layer_rows:
            layers.append(b"")
        else:
            k_pred, v_pred = predicted[layer].index_select(0, index), master_v[layer].index_select(0, index)
            layers.append(encode_delta(torch.cat((k_rows, v_rows)), torch.cat((k_pred, v_pred))))
    spans = packed_extents([len(data) for data in layers])
    offset = header_bound(fields, [LayerExtent(o, n, 0) for o, n in spans])
    last_offset, last_length = spans[-1]
    out = bytearray(offset + last_offset + last_length)
    extents = []
    for (start, length), data in zip(spans, layers):
        out[offset + start : offset + start + length] = data
        extents.append(LayerExtent(start, length, crc32(memoryview(out)[offset + start : offset + start + length])))
    out[:offset] = encode_header(fields, extents, size=offset)
    return out


def check_master(master: BlockHeader, diff: BlockHeader) -> None:
    """ValueError naming the mismatch unless `master` is the full block `diff` was written against."""
    info = diff.diff
    if info is None:
        raise ValueError(f"block {diff.block_ids[0].hex()} is not a diff block")
    if master.diff is not None or master.num_blocks != 1 or master.kv_dtype != "native":
        raise ValueError(f"master {master.block_ids[0].hex()} must be one full native block")
    if master.block_ids[0] != info.master_id:
        raise ValueError(f"diff names master {info.master_id.hex()}, got block {master.block_ids[0].hex()}")
    for name in ("fingerprint", "dtype", "num_layers", "block_size", "num_kv_heads", "head_dim"):
        if getattr(master, name) != getattr(diff, name):
            raise ValueError(
                f"diff {diff.block_ids[0].hex()} and its master disagree on {name}: "
                f"{getattr(diff, name)} vs {getattr(master, name)}"
            )


class DiffRestorer:
    """Rebuilds a sibling as a full block from its (verified) master buffer and its diff header.

    `restore_layer(i, payload)` takes layer i's diff bytes (checked against their crc32) and writes
    the sibling's layer i into `buffer`, while it is hot in cache computing that layer's checksum;
    `finish()` writes the header once every layer is in and returns the full block. The block
    records position master.position + offset where the master recorded one.
    """

    def __init__(self, master: bytes | bytearray | memoryview, diff_header: BlockHeader, shift: RopeShift) -> None:
        master_header = read_header(master)
        check_master(master_header, diff_header)
        assert diff_header.diff is not None  # checked above
        self.diff = diff_header
        self.info = diff_header.diff
        self.shift = shift
        self._master = deserialize_blocks(master)  # zero-copy over a writable master buffer
        position = None if master_header.position is None else master_header.position + self.info.position_offset
        self._fields = {
            "fingerprint": diff_header.fingerprint,
            "dtype": dtype_name(diff_header.dtype),
            "kv_dtype": "native",
            "num_layers": diff_header.num_layers,
            "num_blocks": 1,
            "block_size": diff_header.block_size,
            "num_kv_heads": diff_header.num_kv_heads,
            "head_dim": diff_header.head_dim,
            "block_ids": [diff_header.block_ids[0].hex()],
            **({} if position is None else {"position": position}),
        }
        layout = master_header.layout
        self._layout = layout
        self._extents = [LayerExtent(i * layout.stride, layout.length, 0) for i in range(diff_header.num_layers)]
        self._offset = header_bound(self._fields, self._extents)
        self.buffer = bytearray(self._offset + (diff_header.num_layers - 1) * layout.stride + layout.length)
        self._done: set[int] = set()

    def restore_layer(self, layer: int, payload: bytes | bytearray | memoryview, verified: bool = False) -> None:
        """Layer `layer` of the sibling from its diff bytes; `verified` when the caller checked their crc32."""
        extent = self.diff.layers[layer]
        view = memoryview(payload).cast("B")
        if len(view) != extent.length or not (verified or crc32(view) == extent.crc32):
            raise CorruptBlockError(f"diff block corrupt: layer {layer} checksum mismatch", layer=layer)
        rows = self.info.rows[layer]
        shape = (len(rows), self.diff.num_kv_heads, self.diff.head_dim)
        k = self.shift.shift(self._master.k[layer, 0], self.info.position_offset)
        v = self._master.v[layer, 0]
        if rows:
            index = torch.tensor(rows, dtype=torch.long)
            v = v.clone()
            if self.info.codec == ROWS:
                v_at = diff_sections(len(rows), self.diff.row_bytes).v
                k[index] = _rows(view, 0, shape, self.diff.dtype)
                v[index] = _rows(view, v_at, shape, self.diff.dtype)
            else:
                both = decode_delta(view, torch.cat((k.index_select(0, index), v.index_select(0, index))), layer)
                k[index], v[index] = both[: len(rows)], both[len(rows) :]
        base = self._offset + layer * self._layout.stride
        _write(self.buffer, base + self._layout.k, k)
        _write(self.buffer, base + self._layout.v, v)
        written = memoryview(self.buffer)[base : base + self._layout.length]
        self._extents[layer] = LayerExtent(layer * self._layout.stride, self._layout.length, crc32(written))
        self._done.add(layer)

    def finish(self) -> bytearray:
        if len(self._done) != self.diff.num_layers:
            missing = sorted(set(range(self.diff.num_layers)) - self._done)
            raise CorruptBlockError(f"diff block incomplete: layers {missing} not restored")
        self.buffer[: self._offset] = encode_header(self._fields, self._extents, size=self._offset)
        return self.buffer


def restore_block(
    master: bytes | bytearray | memoryview, diff: bytes | bytearray | memoryview, shift: RopeShift
) -> bytearray:
    """The sibling as a full block, from whole master and diff buffers (both verified here)."""
    view = memoryview(diff).cast("B")
    header = read_header(view)
    restorer = DiffRestorer(master, header, shift)
    for layer, extent in enumerate(header.layers):
        start = header.payload_offset + extent.offset
        restorer.restore_layer(layer, view[start : start + extent.length])
    return restorer.finish()


def full_block(k: torch.Tensor, v: torch.Tensor, block_id: bytes, fingerprint: str, position: int) -> bytearray:
    """A master: one block [num_layers, block_size, heads, head_dim] recording its canonical position."""
    return serialize_blocks(k.unsqueeze(1), v.unsqueeze(1), [block_id], fingerprint, position=position)


def _differs(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[layers, tokens]: whether any value of the row differs bit for bit (-0.0 vs 0.0, NaNs: exactly)."""
    as_int = _INT_VIEW[a.dtype.itemsize]
    return (a.contiguous().view(as_int) != b.contiguous().view(as_int)).flatten(2).any(dim=2)


def _raw_rows(k_rows: torch.Tensor, v_rows: torch.Tensor, row_bytes: int) -> bytes:
    """A `rows` layer: K rows, then V rows on the next 64-byte boundary."""
    if not len(k_rows):
        return b""
    sections = diff_sections(len(k_rows), row_bytes)
    out = bytearray(sections.length)
    _write(out, 0, k_rows)
    _write(out, sections.v, v_rows)
    return bytes(out)


def _rows(view: memoryview, offset: int, shape: tuple[int, int, int], dtype: torch.dtype) -> torch.Tensor:
    count = shape[0] * shape[1] * shape[2]
    return torch.frombuffer(bytearray(view[offset : offset + count * dtype.itemsize]), dtype=dtype).view(shape)


def _write(buf: bytearray, offset: int, tensor: torch.Tensor) -> None:
    src = tensor.contiguous().view(torch.uint8).reshape(-1)
    if src.numel() == 0:  # a layer without rows
        return
    torch.frombuffer(buf, dtype=torch.uint8, offset=offset, count=src.numel()).copy_(src)
