"""The KV block wire/disk format shared by the store, the network and the engines.

`serialize_blocks` turns per-layer K/V of several blocks into one buffer (layout in
`block_header`); `deserialize_blocks` reads all or a range of layers back, and `decode_layers`
decodes a layer range that was read on its own (header first, then a positioned read of
`payload_range`), which is how a layerwise load fetches layer l of many blocks.

Native-dtype reads are zero-copy over a writable buffer (bytearray, writable memoryview or mmap):
the returned tensors alias it. A read-only buffer (bytes) is copied first, because torch has no
read-only tensors and a view of it would let a caller silently mutate an immutable object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentserve.common.checksum import crc32
from agentserve.kv.block_header import (
    DTYPES,
    KV_DTYPES,
    PREFIX_SIZE,
    BlockHeader,
    CorruptBlockError,
    FingerprintMismatchError,
    LayerExtent,
    check_fingerprint,
    check_layers,
    dtype_name,
    encode_header,
    header_bound,
    header_size,
    layer_layout,
    payload_range,
    read_header,
)
from agentserve.kv.fp8 import FP8_DTYPE, dequantize, quantize_per_token

# The store and engines import the whole format from here; block_header holds the details.
__all__ = [
    "PREFIX_SIZE",
    "BlockHeader",
    "CorruptBlockError",
    "FingerprintMismatchError",
    "KVBlocks",
    "check_fingerprint",
    "decode_layers",
    "deserialize_blocks",
    "header_size",
    "payload_range",
    "read_header",
    "serialize_blocks",
]


@dataclass
class KVBlocks:
    header: BlockHeader
    k: torch.Tensor  # [len(layers), num_blocks, block_size, num_kv_heads, head_dim]
    v: torch.Tensor
    layers: range  # which of the header's layers k and v hold


def serialize_blocks(
    k: torch.Tensor,
    v: torch.Tensor,
    block_ids: Sequence[bytes],
    fingerprint: str,
    kv_dtype: str = "native",
    position: int | None = None,
) -> bytearray:
    """Encode K/V of shape [num_layers, num_blocks, block_size, num_kv_heads, head_dim].

    `kv_dtype="fp8_e4m3"` stores e4m3 values with a float32 scale per token row of each block and
    layer (for K and V separately; float32 KV in the Walsh-Hadamard basis, `kv.fp8`); a reader
    dequantizes them back to the original dtype.
    `position` records the position of the first token the keys were rotated for: a shared block's master records it
    (`kv.block_diff`), other blocks leave it out.
    """
    _check_inputs(k, v, block_ids, fingerprint, kv_dtype)
    k, v = k.detach().cpu(), v.detach().cpu()
    num_layers, num_blocks, block_size, num_kv_heads, head_dim = k.shape
    layout = layer_layout(k.dtype, kv_dtype, num_blocks, block_size, num_kv_heads, head_dim)
    fields = {
        "fingerprint": fingerprint,
        "dtype": dtype_name(k.dtype),
        "kv_dtype": kv_dtype,
        "num_layers": num_layers,
        "num_blocks": num_blocks,
        "block_size": block_size,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "block_ids": [bytes(b).hex() for b in block_ids],
    }
    if position is not None:
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"position must be a non-negative integer, got {position!r}")
        fields["position"] = position
    extents = [LayerExtent(i * layout.stride, layout.length, 0) for i in range(num_layers)]
    # Reserve the widest header so the payload is written once, in place, before its crcs exist.
    offset = header_bound(fields, extents)
    out = bytearray(offset + (num_layers - 1) * layout.stride + layout.length)
    payload = memoryview(out)[offset:]
    if layout.scales is None:  # every layer's K, then every layer's V, in one copy each
        _write_layers(payload, layout.stride, layout.k, k)
        _write_layers(payload, layout.stride, layout.v, v)
    for i in range(num_layers):
        base = i * layout.stride
        if layout.scales is not None:
            qk, k_scales = quantize_per_token(k[i])
            qv, v_scales = quantize_per_token(v[i])
            _write(payload, base + layout.k, qk)
            _write(payload, base + layout.v, qv)
            _write(payload, base + layout.scales, torch.stack([k_scales, v_scales]))
        extents[i] = LayerExtent(base, layout.length, crc32(payload[base : base + layout.length]))
    payload.release()
    out[:offset] = encode_header(fields, extents, size=offset)
    return out


def deserialize_blocks(
    buf: bytes | bytearray | memoryview,
    expected_fingerprint: str | None = None,
    layers: range | None = None,
    dtype: torch.dtype | None = None,
) -> KVBlocks:
    """Decode a whole buffer, or only `layers` of it; checksums of the selected layers are verified.

    Tensors come back in the header's dtype unless `dtype` is given.
    """
    view = memoryview(buf).cast("B")
    header = read_header(view)
    check_fingerprint(header, expected_fingerprint)
    layers = check_layers(header, layers)
    offset, length = payload_range(header, layers.start, layers.stop)
    return decode_layers(header, view[offset : offset + length], layers, dtype)


def decode_layers(
    header: BlockHeader,
    payload: bytes | bytearray | memoryview,
    layers: range,
    dtype: torch.dtype | None = None,
    expected_fingerprint: str | None = None,
) -> KVBlocks:
    """Decode the bytes of `payload_range(header, layers.start, layers.stop)`, read on their own."""
    check_fingerprint(header, expected_fingerprint)
    if header.diff is not None:
        raise ValueError(
            f"block {header.block_ids[0].hex()} is a diff against master {header.diff.master_id.hex()}: "
            "restore it (kv.block_diff) before decoding"
        )
    layers = check_layers(header, layers)
    view = memoryview(payload).cast("B")
    _, length = payload_range(header, layers.start, layers.stop)
    if len(view) < length:
        raise CorruptBlockError(
            f"KV block payload truncated: layers {layers.start}..{layers.stop - 1} need {length} bytes, got {len(view)}"
        )
    view = view[:length]
    base = header.layers[layers.start].offset
    for i in layers:
        extent = header.layers[i]
        start = extent.offset - base
        if crc32(view[start : start + extent.length]) != extent.crc32:
            raise CorruptBlockError(f"KV block payload corrupt: layer {i} checksum mismatch", layer=i)
    if view.readonly:
        view = memoryview(bytearray(view))
    out_dtype = dtype if dtype is not None else header.dtype
    layout, n = header.layout, len(layers)
    if layout.scales is None:  # native: only fp8 layouts have scales
        k = _strided(view, header, n, layout.k, header.dtype).to(out_dtype)  # .to: no copy if same dtype
        v = _strided(view, header, n, layout.v, header.dtype).to(out_dtype)
    else:
        scales = _scales(view, header, n, layout.scales)
        # Dequantized as the KV it was (its dtype says whether in the Hadamard basis, `kv.fp8`).
        k = dequantize(_strided(view, header, n, layout.k, FP8_DTYPE), scales[:, 0], header.dtype).to(out_dtype)
        v = dequantize(_strided(view, header, n, layout.v, FP8_DTYPE), scales[:, 1], header.dtype).to(out_dtype)
    return KVBlocks(header=header, k=k, v=v, layers=layers)


def _check_inputs(
    k: torch.Tensor, v: torch.Tensor, block_ids: Sequence[bytes], fingerprint: str, kv_dtype: str
) -> None:
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    if k.dim() != 5 or k.shape != v.shape or k.dtype != v.dtype:
        raise ValueError(
            "k and v must share one shape [num_layers, num_blocks, block_size, num_kv_heads, head_dim] "
            f"and dtype; got {tuple(k.shape)} {k.dtype} and {tuple(v.shape)} {v.dtype}"
        )
    if k.dtype not in DTYPES.values():
        raise ValueError(f"unsupported KV dtype {k.dtype}; use float32, bfloat16 or float16")
    if k.numel() == 0:
        raise ValueError(f"k and v must not be empty, got shape {tuple(k.shape)}")
    if len(block_ids) != k.shape[1]:
        raise ValueError(f"{len(block_ids)} block ids for {k.shape[1]} blocks")
    if not isinstance(fingerprint, str):
        raise ValueError(f"fingerprint must be str, got {type(fingerprint).__name__}")


def _write_layers(payload: memoryview, stride: int, offset: int, tensor: torch.Tensor) -> None:
    """Layer i of `tensor` at byte `offset + i * stride` of `payload`, for every layer at once: a
    block of a 61-layer model is one copy, not 61 (a handoff serializes every block of a turn)."""
    src = tensor.contiguous().view(torch.uint8).reshape(tensor.shape[0], -1)
    dst = torch.frombuffer(payload, dtype=torch.uint8).as_strided(tuple(src.shape), (stride, 1), offset)
    dst.copy_(src)


def _write(payload: memoryview, offset: int, tensor: torch.Tensor) -> None:
    src = tensor.contiguous().view(torch.uint8).reshape(-1)
    torch.frombuffer(payload, dtype=torch.uint8, offset=offset, count=src.numel()).copy_(src)


def _strided(view: memoryview, header: BlockHeader, num_layers: int, section: int, dtype: torch.dtype) -> torch.Tensor:
    """[num_layers, num_blocks, block_size, heads, head_dim] view of one section of every layer."""
    elem = dtype.itemsize
    flat = torch.frombuffer(view, dtype=dtype, count=len(view) // elem)
    block = header.block_size * header.num_kv_heads * header.head_dim
    return flat.as_strided(
        (num_layers, header.num_blocks, header.block_size, header.num_kv_heads, header.head_dim),
        (header.layout.stride // elem, block, header.num_kv_heads * header.head_dim, header.head_dim, 1),
        section // elem,
    )


def _scales(view: memoryview, header: BlockHeader, num_layers: int, section: int) -> torch.Tensor:
    """float32 [num_layers, 2, num_blocks, block_size]: K then V row scales, at byte `section` of each layer."""
    flat = torch.frombuffer(view, dtype=torch.float32, count=len(view) // 4)
    rows = header.num_blocks * header.block_size
    return flat.as_strided(
        (num_layers, 2, header.num_blocks, header.block_size),
        (header.layout.stride // 4, rows, header.block_size, 1),
        section // 4,
    )
