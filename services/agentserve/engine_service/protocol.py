"""Protobuf <-> engine types shared by the prefill and decode servicers."""

from __future__ import annotations

from agentserve.engine.sampling import SamplingParams
from agentserve.v1 import common_pb2


def sampling_from_proto(msg: common_pb2.SamplingParams, max_tokens: int | None = None) -> SamplingParams:
    """Validated SamplingParams (ValueError on bad values); top_p 0 means 'unset' = 1.0."""
    return SamplingParams(
        max_tokens=int(msg.max_tokens if max_tokens is None else max_tokens),
        temperature=float(msg.temperature),
        top_p=float(msg.top_p) if msg.top_p > 0 else 1.0,
        seed=int(msg.seed) if msg.HasField("seed") else None,
        ignore_eos=msg.ignore_eos,
    )
