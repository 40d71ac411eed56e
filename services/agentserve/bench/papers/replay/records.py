"""What the replayer records: one `TurnRecord` per turn, one `SessionRecord` per session.

Times are seconds on the replayer's monotonic clock, relative to the start of the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TurnRecord:
    session_id: str
    index: int
    first: bool  # a first turn (no reusable context of its own) or a later one
    sent_s: float  # the request left the client
    prompt_tokens: int = 0
    output_tokens: int = 0  # tokens received
    cached_tokens: int = 0  # as the server reported
    expected_cached_tokens: int = 0  # what the workload's reuse allows, given what had finished
    trace_cached_tokens: int = 0  # what the recorded trace's reuse allows (hash ids in trace order)
    first_token_s: float | None = None
    second_token_s: float | None = None
    last_token_s: float | None = None
    done_s: float | None = None  # output and tool calls finished
    tool_s: float = 0.0  # wall time waiting on this turn's tool calls
    prefill_engine: str = ""
    decode_engine: str = ""
    handoff_held_blocks: int = 0  # full prompt blocks the decode engine held when the turn reached it
    loaded_blocks: int = 0  # store hits the prefill engine loaded
    retries: int = 0  # times the server refused the turn or its session for now (429) and it was sent again
    busy_s: float = 0.0  # time spent waiting out those refusals' Retry-After
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def tt2t_s(self) -> float | None:
        return None if self.second_token_s is None else self.second_token_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.last_token_s is None or self.output_tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> float | None:
        """Mean gap between tokens after the second: the decode engine's own pace. TPOT also
        carries the gap from the first token to the second, which under disaggregation is the
        hand-off from the prefill engine to the decode engine."""
        if self.second_token_s is None or self.last_token_s is None or self.output_tokens < 3:
            return None
        return (self.last_token_s - self.second_token_s) / (self.output_tokens - 2)

    @property
    def e2e_s(self) -> float | None:
        return None if self.last_token_s is None else self.last_token_s - self.sent_s

    def to_json(self) -> dict:
        out = asdict(self)
        out.update(ttft_s=self.ttft_s, tt2t_s=self.tt2t_s, tpot_s=self.tpot_s, itl_s=self.itl_s, e2e_s=self.e2e_s)
        return out


@dataclass
class SessionRecord:
    session_id: str
    start_s: float
    end_s: float | None = None
    turns: int = 0
    failed_turns: int = 0
    tool_s: float = 0.0
    engines: set[str] = field(default_factory=set)

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s
