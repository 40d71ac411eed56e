"""The ways cached KV reaches a prefill engine (DESIGN.md, DualPath KV loading), shared by the
scheduler that chooses one and the prefill engine that follows it."""

from __future__ import annotations

import enum

from agentserve.v1 import prefill_pb2


class KVPath(enum.Enum):
    A = "A"  # store -> the prefill engine's storage NIC
    B = "B"  # store -> a decode engine's storage NIC -> compute network -> the prefill engine
    SPLIT = "SPLIT"  # some blocks by A, the others by B, concurrently

    def to_proto(self) -> int:
        return _TO_PROTO[self]

    @classmethod
    def from_proto(cls, value: int) -> KVPath:
        """UNSPECIFIED reads as A; ValueError for a value this build does not know."""
        try:
            return _FROM_PROTO[value]
        except KeyError:
            raise ValueError(f"unknown kv_path {value}") from None


_TO_PROTO = {KVPath.A: prefill_pb2.KV_PATH_A, KVPath.B: prefill_pb2.KV_PATH_B, KVPath.SPLIT: prefill_pb2.KV_PATH_SPLIT}
_FROM_PROTO = {prefill_pb2.KV_PATH_UNSPECIFIED: KVPath.A, **{v: k for k, v in _TO_PROTO.items()}}
