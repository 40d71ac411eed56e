"""One turn's engine calls and what a turn streams back, as plain types.

The scheduler builds `PrefillRequest`/`GenerateRequest` and reads `PrefillResult`/`GenerateChunk`;
the engines' workers take and return the same types; `agentserve.convert` puts them on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentserve.contracts.context import ContextLayout
from agentserve.contracts.kv import PATH_A, KVPath, LoadPlan
from agentserve.contracts.sampling import SamplingParams
from agentserve.contracts.segments import SegmentedPrompt


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's log-probability under the model's distribution (the logits before
    temperature and top-p), and the `top` most likely tokens as (token id, log-probability)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class PrefillRequest:
    """Prefill `token_ids` over the `store_hit_blocks` leading blocks the store holds (loaded by
    `plan`), then hand the decode engine at `decode_address` the KV it lacks (none if empty)."""

    request_id: str
    session_id: str
    tenant: str
    token_ids: list[int]
    sampling: SamplingParams
    store_hit_blocks: int = 0
    decode_address: str = ""
    plan: LoadPlan = PATH_A
    segments: SegmentedPrompt | None = None  # shared blocks and their reuse; its tokens are token_ids
    priority: int = 0  # the session's scheduling priority (higher first; see agent_priority.py)
    # The context's stored tail after the hits: its tokens (0: none), loaded by the plan's path too.
    store_tail_tokens: int = 0
    # Among equal priorities, the engine's queue takes the lower rank first (scheduler/turn_order.py).
    service_rank: int = 0
    # The session's context as stored after its last reused turn: with reusing segments, the
    # prompt's first tokens are restored from it (contracts/context.py).
    context: ContextLayout | None = None


@dataclass(frozen=True)
class PrefillResult:
    first_token: int
    prompt_tokens: int
    cached_tokens: int  # prompt tokens not computed (engine cache + loaded store hits)
    engine_cached_tokens: int  # of those, resident in the prefill engine before the turn
    loaded_blocks: int  # store hits loaded, by either path
    persisted_blocks: int
    handoff_blocks: int  # full prompt blocks sent to the decode engine
    finished: bool  # the first token ended the turn (EOS, or max_tokens == 1)
    finish_reason: str
    kv_path: KVPath = KVPath.A  # the path the loads took in the end
    relayed_blocks: int = 0  # of the loaded blocks, by path B
    handoff_bytes: int = 0
    handoff_held_blocks: int = 0  # full prompt blocks the decode engine already held (not sent)
    handoff_failed: bool = False  # the decode engine could not take the KV: it, not the prefill, failed
    first_logprob: TokenLogprob | None = None  # when the request asked for logprobs
    context: ContextLayout | None = None  # the prompt's reused KV as stored (masters + diffs), if reused


@dataclass(frozen=True)
class GenerateRequest:
    """Continue `token_ids` (its first `prompt_tokens` are the prompt, the rest already generated)."""

    request_id: str
    session_id: str
    tenant: str
    token_ids: list[int]
    prompt_tokens: int
    sampling: SamplingParams
    priority: int = 0
    persist_tail: bool = False  # also persist the partial last block under its tail id at the end
    context: ContextLayout | None = None  # the prompt's reused KV in the store: decode over it, restored


@dataclass(frozen=True)
class GenerateChunk:
    token_ids: list[int]
    finished: bool = False
    finish_reason: str = ""
    cached_tokens: int = 0
    persisted_blocks: int = 0  # final chunk: the turn's new blocks the decode engine persisted
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token id, when asked for


@dataclass(frozen=True)
class TurnMeta:
    turn_id: str
    turn_index: int  # 0 for a session's first turn
    prompt_tokens: int
    cached_tokens: int  # prompt tokens the prefill engine did not compute (engine cache + store)
    prefill_engine: str
    decode_engine: str
    trace_id: str  # hex OpenTelemetry trace id; empty if tracing is off
    kv_path: str = "A"  # how store hits reached the prefill engine: A, B or SPLIT
    loaded_blocks: int = 0  # store hits the prefill engine loaded, by either path
    relayed_blocks: int = 0  # of those, by path B
    handoff_blocks: int = 0  # full prompt blocks sent to the decode engine
    handoff_bytes: int = 0  # their bytes on the compute network
    handoff_held_blocks: int = 0  # full prompt blocks the decode engine already held (not sent)
    span_id: str = ""  # hex id of the turn's span: a tool call after the turn becomes its child
    relay_engine: str = ""  # the decode engine that relayed path B (any decode engine); empty on A


@dataclass(frozen=True)
class TurnEvent:
    """What a turn streams back to the client API (gRPC servicer, HTTP gateway)."""

    token_ids: list[int] = field(default_factory=list)
    text: str = ""  # detokenized delta
    metadata: TurnMeta | None = None  # first event only
    finished: bool = False
    finish_reason: str = ""  # "stop" | "length" on the final event
    completion_tokens: int = 0  # final event: tokens generated this turn
    logprobs: list[TokenLogprob] = field(default_factory=list)  # one per token id, when asked for
