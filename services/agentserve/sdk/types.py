"""What a turn streams and returns, as plain dataclasses (no protobuf in the SDK's public types)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentserve.v1 import scheduler_pb2


@dataclass(frozen=True)
class TurnMetadata:
    turn_id: str
    turn_index: int
    prompt_tokens: int
    cached_tokens: int  # prompt tokens served from cache: the number agent workloads live by
    prefill_engine: str
    decode_engine: str
    trace_id: str  # hex OpenTelemetry trace id of the turn
    kv_path: str = ""  # how cached KV reached the prefill engine: A, B (relayed by decode) or SPLIT
    loaded_blocks: int = 0  # store hits the prefill engine loaded
    relayed_blocks: int = 0  # of those, relayed by the decode engine (path B)
    handoff_blocks: int = 0  # full prompt blocks handed to the decode engine
    handoff_bytes: int = 0  # their bytes on the compute network
    handoff_held_blocks: int = 0  # blocks the decode engine already held, so not handed off
    span_id: str = ""  # hex id of the turn's span
    relay_engine: str = ""  # the decode engine that relayed path B (not always decode_engine); empty on A

    @property
    def traceparent(self) -> str:
        """The turn's span as a W3C `traceparent`: a request carrying it joins the turn's trace."""
        return f"00-{self.trace_id}-{self.span_id}-01" if self.trace_id and self.span_id else ""

    @classmethod
    def from_proto(cls, m: scheduler_pb2.TurnMetadata) -> TurnMetadata:
        return cls(
            m.turn_id,
            m.turn_index,
            m.prompt_tokens,
            m.cached_tokens,
            m.prefill_engine,
            m.decode_engine,
            m.trace_id,
            m.kv_path,
            m.loaded_blocks,
            m.relayed_blocks,
            m.handoff_blocks,
            m.handoff_bytes,
            m.handoff_held_blocks,
            m.span_id,
            m.relay_engine,
        )


@dataclass(frozen=True)
class TurnChunk:
    token_ids: tuple[int, ...]
    text: str  # detokenized delta
    finished: bool = False
    finish_reason: str = ""
    completion_tokens: int = 0  # set on the final chunk
    metadata: TurnMetadata | None = None  # first chunk only

    @classmethod
    def from_proto(cls, c: scheduler_pb2.TurnChunk) -> TurnChunk:
        metadata = TurnMetadata.from_proto(c.metadata) if c.HasField("metadata") else None
        return cls(tuple(c.token_ids), c.text, c.finished, c.finish_reason, c.completion_tokens, metadata)


@dataclass(frozen=True)
class TurnResult:
    text: str
    token_ids: list[int]
    finish_reason: str
    completion_tokens: int
    metadata: TurnMetadata | None

    @property
    def prompt_tokens(self) -> int:
        return self.metadata.prompt_tokens if self.metadata else 0

    @property
    def cached_tokens(self) -> int:
        return self.metadata.cached_tokens if self.metadata else 0

    @property
    def trace_id(self) -> str:
        return self.metadata.trace_id if self.metadata else ""


@dataclass(frozen=True)
class SessionClosed:
    turns: int
    tokens: int


@dataclass
class TurnAccumulator:
    """Adds chunks up into a `TurnResult`, whether the caller streamed them or not."""

    texts: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""
    completion_tokens: int = 0
    metadata: TurnMetadata | None = None
    finished: bool = False

    def add(self, chunk: TurnChunk) -> None:
        if chunk.metadata is not None:
            self.metadata = chunk.metadata
        self.texts.append(chunk.text)
        self.token_ids.extend(chunk.token_ids)
        if chunk.finished:
            self.finished = True
            self.finish_reason = chunk.finish_reason
        self.completion_tokens = max(self.completion_tokens, chunk.completion_tokens, len(self.token_ids))

    def result(self) -> TurnResult:
        return TurnResult(
            "".join(self.texts), list(self.token_ids), self.finish_reason, self.completion_tokens, self.metadata
        )
