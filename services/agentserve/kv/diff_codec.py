"""How a diff block's rows are written: as they are (`ROWS`) or as a lossless delta (`XOR_DEFLATE`).

A recomputed row is close to the master row it replaces (the shifted master key, the master
value): in the first layer it differs only in the last bits of its key (fresh rotation against
re-rotation) and not at all in its value; deeper, values that moved a little keep their sign,
exponent and top mantissa bits. `XOR_DEFLATE` stores each layer's rows as the XOR of their bits
with the prediction (so equal bits are zero bits), split into byte planes (every value's byte 0,
then every byte 1, ...: the zeroed high bytes form long runs), deflated. It is lossless: the
restore XORs the prediction back, so a restored row is bit for bit the row written.

Measured on the trained default model (fp32 KV, bench/papers/tokendance/storage.py): the first layer's
rows shrink to about a tenth, deeper layers' to about nine tenths (fp32 mantissas that moved are
noise to any lossless coder). A blended prefill's siblings do not differ in the first layer at
all (`engine.blend` hands on the re-rotated master's first-layer KV), so what the coder sees from
it is the deeper layers' rows.
"""

from __future__ import annotations

import zlib

import torch

from agentserve.kv.block_header import CorruptBlockError
from agentserve.kv.diff_layout import DIFF_CODECS, ROWS, XOR_DEFLATE

__all__ = ["DIFF_CODECS", "ROWS", "XOR_DEFLATE", "decode_delta", "encode_delta"]

# zlib level: 6 (the default) takes ~1.5x level 1's time for ~3% fewer bytes on KV deltas; the
# writer runs once per block, the reader (whose cost does not depend on the level) on every load.
DEFLATE_LEVEL = 6

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32}


def encode_delta(rows: torch.Tensor, predicted: torch.Tensor) -> bytes:
    """`rows` (K rows then V rows, any shape) against `predicted` of the same shape and dtype."""
    return zlib.compress(_planes(_bits(rows) ^ _bits(predicted)), DEFLATE_LEVEL)


def decode_delta(payload: memoryview, predicted: torch.Tensor, layer: int) -> torch.Tensor:
    """The rows `encode_delta` wrote against `predicted` (their shape and dtype); CorruptBlockError
    when the payload does not inflate to exactly that many bytes."""
    size = predicted.numel() * predicted.element_size()
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(payload, size)  # bounded: a crafted payload cannot inflate past the rows
    except zlib.error as exc:
        raise CorruptBlockError(f"diff block corrupt: layer {layer} does not inflate ({exc})", layer=layer) from None
    if len(raw) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise CorruptBlockError(f"diff block corrupt: layer {layer} inflates to other than {size} bytes", layer=layer)
    itemsize = predicted.element_size()
    planes = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(itemsize, -1)
    delta = planes.t().contiguous().view(_INT_VIEW[itemsize]).view(predicted.shape)
    return (delta ^ _bits(predicted)).view(predicted.dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_INT_VIEW[t.element_size()])


def _planes(bits: torch.Tensor) -> bytes:
    """Byte planes: byte 0 of every value, then byte 1, ... (little-endian: the low bytes first)."""
    flat = bits.reshape(-1).view(torch.uint8).view(-1, bits.element_size())
    return flat.t().contiguous().numpy().tobytes()
