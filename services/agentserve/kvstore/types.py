"""The plain values the kvstore's domain classes take and return (the servicer maps them to protobuf)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final


class Tier(enum.IntEnum):
    """Where a block is served from; the values equal the proto enum `agentserve.v1.Tier`."""

    NONE = 0  # not stored
    DRAM = 1  # in the DRAM cache (and, since DRAM is inclusive, on SSD too)
    SSD = 2  # on SSD only


class NotCached(enum.Enum):
    """What a `nowait` read returns when serving it would wait for the disk."""

    NOT_CACHED = "not cached"


NOT_CACHED: Final = NotCached.NOT_CACHED  # Final: `x is NOT_CACHED` then narrows x's type


@dataclass(frozen=True)
class BlockRead:
    """A whole block or a layer range of it, ready to send.

    `data` is the block's header followed by the payload bytes of `layers`; when `layers` covers
    every layer, `data` is exactly the stored block. Decode a range with
    `block_format.decode_layers(read_header(data), memoryview(data)[header_size:], layers)`.
    A `nowait` read of the page cache hands over the bytearray it read into, and a client's read
    is a view of the message it received: treat `data` as read-only whatever its type.
    """

    block_id: bytes
    data: bytes | bytearray | memoryview
    header_size: int
    layers: range
    num_layers: int
    tier: Tier
    header: Any = field(default=None, compare=False, repr=False)  # parsed BlockHeader, where the reader had it

    @property
    def whole(self) -> bool:
        return self.layers == range(self.num_layers)


@dataclass(frozen=True)
class LookupResult:
    prefix_blocks: int  # leading ids stored, in any tier
    tiers: tuple[Tier, ...]  # one per asked id


@dataclass(frozen=True)
class WriteResult:
    stored: int = 0  # newly written and durable
    existing: int = 0  # already stored; nothing written
    bytes_written: int = 0

    def __add__(self, other: WriteResult) -> WriteResult:
        return WriteResult(
            self.stored + other.stored, self.existing + other.existing, self.bytes_written + other.bytes_written
        )


@dataclass(frozen=True)
class TierStats:
    tier: Tier
    blocks: int
    bytes: int
    budget_bytes: int
    hits: int  # reads served by this tier
    misses: int  # reads this tier could not serve (DRAM misses go on to SSD)
    evictions: int  # blocks removed to stay within the budget (deletes and corrupt drops not counted)
    peak_bytes: int  # most bytes held since start (SSD: including writes in flight)


@dataclass(frozen=True)
class StoreStats:
    dram: TierStats
    ssd: TierStats
    reserved_bytes: int  # SSD bytes held for writes in flight (counted against the SSD budget)
    pinned_blocks: int
    corrupt_dropped: int
    read_bytes: int
    write_bytes: int
    read_bytes_per_s: float  # over the last `RateMeter.window_s` seconds
    write_bytes_per_s: float
