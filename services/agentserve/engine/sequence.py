"""Sequence: one request's tokens, KV slots and progress through the engine."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from agentserve.contracts import SamplingParams, TokenLogprob

if TYPE_CHECKING:
    from agentserve.engine.grammar import SequenceGrammar
    from agentserve.engine.segmented_prefill import Reused
    from agentserve.engine.shared_context import ReuseStats

_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    tenant_salt: str = ""
    priority: int = 0  # higher is admitted first; at the engine's critical priority it may use the reserve
    rank: int = 0  # among equal priorities, lower is admitted first (`PrefillRequest.service_rank`)
    request_id: str = field(default_factory=lambda: f"seq-{next(_ids)}")
    status: SequenceStatus = SequenceStatus.WAITING
    slots: list[int] = field(default_factory=list)
    block_ids: list[bytes] = field(default_factory=list)  # chained ids of full blocks so far
    num_cached_tokens: int = 0  # prompt tokens whose KV came from cache at admission
    num_computed: int = 0  # leading tokens whose KV is in the pool
    num_sealed: int = 0  # leading full blocks registered in the prefix cache
    finish_reason: str | None = None
    generator: torch.Generator | None = None
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per output token, when params ask
    grammar: SequenceGrammar | None = None  # constrains sampling when the request asks for structured output
    # False once reused shared blocks (TokenDance) stand in for recomputed ones: this KV is close to,
    # not equal to, a full recompute's, so none of its blocks may enter the exact prefix cache.
    exact_kv: bool = True
    reuse_stats: ReuseStats | None = None  # how a segmented prompt's prefill reused its shared blocks
    reused: Reused | None = None  # a segmented prompt's KV and masters, until the caller persists them
    prefill_started_s: float | None = None  # time.monotonic() when its prefill forward began (queue wait ends)
    seal_tail: bool = False  # cache its partial last block under its tail id when it finishes
    tail_id: bytes | None = None  # that block's id, once cached

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
