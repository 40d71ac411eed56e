"""What a turn streams back: the types the gRPC servicer and the HTTP gateway translate."""

from __future__ import annotations

from dataclasses import dataclass, field


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


@dataclass(frozen=True)
class TurnEvent:
    token_ids: list[int] = field(default_factory=list)
    text: str = ""  # detokenized delta
    metadata: TurnMeta | None = None  # first event only
    finished: bool = False
    finish_reason: str = ""  # "stop" | "length" on the final event
    completion_tokens: int = 0  # final event: tokens generated this turn
