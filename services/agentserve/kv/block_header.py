"""The header of a KV block buffer: what a reader learns before touching any KV bytes.

Buffer layout (all integers little-endian):

    prefix   magic b"ASKV" | u16 format version | u32 header length | u32 crc32 of the header
    header   UTF-8 JSON, space-padded so the payload starts on a 64-byte boundary
    payload  layer-major; per layer: K of all blocks | V of all blocks [| fp8 scales]

Version 1 is a full block (optionally with the canonical `position` of its first token, as a
shared block's master records it); version 2 is a diff block: one sibling stored as the rows that
differ from its master (`diff_layout`), which a version-1 reader refuses by its version.

Within a layer every section starts on a 64-byte boundary and layers are a fixed stride apart, so
a layer range is one contiguous byte range (`payload_range`) a store can read with one positioned
read, and each layer carries its own crc32 so a reader verifies exactly what it read.
"""

from __future__ import annotations

import functools
import json
import struct
from dataclasses import dataclass

import torch

from agentserve.common.checksum import crc32
from agentserve.kv.diff_layout import DiffInfo, check_extents

MAGIC = b"ASKV"
FORMAT_VERSION = 1
DIFF_FORMAT_VERSION = 2
_VERSIONS = (FORMAT_VERSION, DIFF_FORMAT_VERSION)
ALIGN = 64
KV_DTYPES = ("native", "fp8_e4m3")
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_PREFIX = struct.Struct("<4sHII")
PREFIX_SIZE = _PREFIX.size
_MAX_HEADER_BYTES = 64 << 20  # far above any real header; bounds what a corrupt length can ask for
_MAX_CRC = 0xFFFFFFFF
_SHAPE_FIELDS = ("num_layers", "num_blocks", "block_size", "num_kv_heads", "head_dim")


class CorruptBlockError(ValueError):
    """Stored or received bytes do not match their checksum (or stop short): refetch or drop."""

    def __init__(self, message: str, layer: int | None = None) -> None:
        super().__init__(message)
        self.layer = layer


class FingerprintMismatchError(ValueError):
    """The block was computed by a different model than the reader runs."""


@dataclass(frozen=True)
class LayerExtent:
    offset: int  # bytes from payload start
    length: int
    crc32: int


@dataclass(frozen=True)
class LayerLayout:
    """Byte offsets of the sections inside one layer, and the distance between layers."""

    k: int
    v: int
    scales: int | None  # fp8 only: float32 [2, num_blocks, block_size], K row scales then V's
    length: int
    stride: int


@dataclass(frozen=True)
class BlockHeader:
    version: int
    fingerprint: str
    dtype: torch.dtype  # dtype of the KV as computed; fp8 payloads dequantize to it
    kv_dtype: str  # "native" or "fp8_e4m3": how the payload stores it
    num_layers: int
    num_blocks: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    block_ids: tuple[bytes, ...]
    layers: tuple[LayerExtent, ...]
    payload_offset: int  # bytes from buffer start
    position: int | None = None  # a master's canonical position of its first token, where recorded
    diff: DiffInfo | None = None  # a diff block's master and rows (then the payload holds only those)

    @property
    def row_bytes(self) -> int:
        """Bytes of one token's K (or V) in one layer, as stored natively."""
        return self.num_kv_heads * self.head_dim * self.dtype.itemsize

    @property
    def layout(self) -> LayerLayout:
        """The layer layout of a full block (a diff block's layers are `diff_layout.diff_extents`)."""
        return layer_layout(
            self.dtype, self.kv_dtype, self.num_blocks, self.block_size, self.num_kv_heads, self.head_dim
        )


def layer_layout(
    dtype: torch.dtype, kv_dtype: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int
) -> LayerLayout:
    elem = 1 if kv_dtype == "fp8_e4m3" else dtype.itemsize
    side = num_blocks * block_size * num_kv_heads * head_dim * elem
    v = _align(side)
    if kv_dtype == "fp8_e4m3":
        scales = _align(v + side)
        length = scales + 2 * num_blocks * block_size * 4
    else:
        scales, length = None, v + side
    return LayerLayout(k=0, v=v, scales=scales, length=length, stride=_align(length))


def encode_header(fields: dict, layers: list[LayerExtent], size: int | None = None) -> bytes:
    """Prefix + padded JSON for `fields` (everything but layers and version) and `layers`.

    With `size` the result is padded to exactly that many bytes; `header_bound` gives a size every
    choice of crc values fits in, so the payload can be written before its checksums are known.
    """
    version = DIFF_FORMAT_VERSION if "diff" in fields else FORMAT_VERSION
    doc = {
        "version": version,
        **fields,
        "layers": [{"offset": e.offset, "length": e.length, "crc32": e.crc32} for e in layers],
    }
    body = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    total = size if size is not None else _align(PREFIX_SIZE + len(body))
    if PREFIX_SIZE + len(body) > total:
        raise RuntimeError("KV block header outgrew its reserved size")
    body += b" " * (total - PREFIX_SIZE - len(body))  # JSON ignores trailing whitespace
    return _PREFIX.pack(MAGIC, version, len(body), crc32(body)) + body


def header_bound(fields: dict, layers: list[LayerExtent]) -> int:
    widest = [LayerExtent(e.offset, e.length, _MAX_CRC) for e in layers]
    return len(encode_header(fields, widest))


def header_size(prefix: bytes | bytearray | memoryview) -> int:
    """Bytes from buffer start to payload start, from the first PREFIX_SIZE bytes alone."""
    return PREFIX_SIZE + _read_prefix(memoryview(prefix).cast("B"))[0]


def is_diff_buffer(prefix: bytes | bytearray | memoryview) -> bool:
    """Whether a buffer holds a diff block, from its first PREFIX_SIZE bytes alone."""
    return _read_prefix(memoryview(prefix).cast("B"))[2] == DIFF_FORMAT_VERSION


def read_header(buf: bytes | bytearray | memoryview) -> BlockHeader:
    """Parse and verify the header at the start of `buf` (the payload need not be present)."""
    view = memoryview(buf).cast("B")
    header_len, header_crc, version = _read_prefix(view)
    end = PREFIX_SIZE + header_len
    if len(view) < end:
        raise CorruptBlockError(f"KV block buffer truncated: header needs {end} bytes, got {len(view)}")
    body = bytes(view[PREFIX_SIZE:end])
    return (_parse_body_cached if len(body) <= HEADER_CACHE_MAX_BODY else _parse_body)(body, header_crc, version)


def _parse_body(body: bytes, header_crc: int, version: int) -> BlockHeader:
    """The checked, parsed header whose JSON body is `body`."""
    if crc32(body) != header_crc:
        raise CorruptBlockError("KV block header corrupt: checksum mismatch")
    try:
        doc = json.loads(body)
        return _header_from_doc(doc, payload_offset=PREFIX_SIZE + len(body), version=version)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed KV block header: {exc}") from None


# Headers are cached by their exact bytes: the same bytes always parse to the same (immutable)
# header, and a store serving a session's blocks reads the same headers over and over. Parsing one
# costs ~0.1 ms (a quarter of reading a warm 1 MB block), a lookup ~2 us. Errors are not cached.
# Single-block headers are ~2 KB; the bound keeps multi-block transfer headers out.
HEADER_CACHE_ENTRIES = 4096
HEADER_CACHE_MAX_BODY = 16 << 10
_parse_body_cached = functools.lru_cache(maxsize=HEADER_CACHE_ENTRIES)(_parse_body)


def check_fingerprint(header: BlockHeader, expected: str | None) -> None:
    if expected is not None and header.fingerprint != expected:
        raise FingerprintMismatchError(f"block belongs to model {header.fingerprint}, expected {expected}")


def check_layers(header: BlockHeader, layers: range | None) -> range:
    """Normalize a layer selection (None = all) and reject an empty, stepped or out-of-range one."""
    if layers is None:
        return range(header.num_layers)
    if not isinstance(layers, range) or layers.step != 1 or not (0 <= layers.start < layers.stop <= header.num_layers):
        raise ValueError(
            f"layers must be a non-empty range(start, stop) within [0, {header.num_layers}), got {layers!r}"
        )
    return layers


def payload_range(header: BlockHeader, layer_start: int, layer_stop: int) -> tuple[int, int]:
    """(offset from buffer/file start, length) of the bytes holding layers [layer_start, layer_stop)."""
    layers = check_layers(header, range(layer_start, layer_stop))
    first, last = header.layers[layers.start], header.layers[layers.stop - 1]
    return header.payload_offset + first.offset, last.offset + last.length - first.offset


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise ValueError(f"unsupported KV dtype {dtype}; use float32, bfloat16 or float16") from None


def _read_prefix(view: memoryview) -> tuple[int, int, int]:
    if len(view) < PREFIX_SIZE:
        raise CorruptBlockError(f"KV block buffer truncated: {len(view)} bytes, prefix needs {PREFIX_SIZE}")
    magic, version, header_len, header_crc = _PREFIX.unpack_from(view)
    if magic != MAGIC:
        raise ValueError(f"not a KV block buffer: magic {magic!r}, expected {MAGIC!r}")
    if version not in _VERSIONS:
        raise ValueError(f"unsupported KV block format version {version}; this build reads {_VERSIONS}")
    if header_len > _MAX_HEADER_BYTES:
        raise CorruptBlockError(f"KV block header length {header_len} is implausible; prefix corrupt")
    return header_len, header_crc, version


def _header_from_doc(doc: dict, payload_offset: int, version: int) -> BlockHeader:
    if doc["version"] != version:
        raise ValueError(f"version {doc['version']} disagrees with the prefix's {version}")
    if doc["dtype"] not in DTYPES:
        raise ValueError(f"unknown dtype {doc['dtype']!r}")
    if doc["kv_dtype"] not in KV_DTYPES:
        raise ValueError(f"unknown kv_dtype {doc['kv_dtype']!r}")
    shape = {name: doc[name] for name in _SHAPE_FIELDS}
    for name, value in shape.items():
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    block_ids = tuple(bytes.fromhex(h) for h in doc["block_ids"])
    if len(block_ids) != shape["num_blocks"]:
        raise ValueError(f"{len(block_ids)} block ids for {shape['num_blocks']} blocks")
    layers = tuple(LayerExtent(int(e["offset"]), int(e["length"]), int(e["crc32"])) for e in doc["layers"])
    position = doc.get("position")
    if position is not None and (not isinstance(position, int) or position < 0):
        raise ValueError(f"position must be a non-negative integer, got {position!r}")
    diff = None
    if doc["version"] == DIFF_FORMAT_VERSION:
        diff = DiffInfo.from_doc(doc["diff"])
        diff.check(shape["num_layers"], shape["block_size"])
        if shape["num_blocks"] != 1 or doc["kv_dtype"] != "native":
            raise ValueError("a diff block holds exactly 1 block in the native kv_dtype")
    header = BlockHeader(
        version=doc["version"],
        fingerprint=str(doc["fingerprint"]),
        dtype=DTYPES[doc["dtype"]],
        kv_dtype=doc["kv_dtype"],
        **shape,
        block_ids=block_ids,
        layers=layers,
        payload_offset=payload_offset,
        position=position,
        diff=diff,
    )
    stated = [(e.offset, e.length) for e in layers]
    if diff is not None:
        check_extents(diff, header.row_bytes, stated)
        return header
    layout = header.layout
    if stated != [(i * layout.stride, layout.length) for i in range(header.num_layers)]:
        raise ValueError("layer extents do not match the layout implied by the shape")
    return header


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
