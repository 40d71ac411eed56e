"""RunningTurn: the state of one turn while `TurnRunner` runs it, shared by its parts.

The turn's prompt and sampling, its output so far, the engines its KV went to, and its KV in the
store and on the decode engine (`TurnKV` reads and writes the `prompt_blocks`, `claim`,
`context_tail` and `tail_tokens` fields).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from agentserve.contracts import SamplingParams
from agentserve.contracts.context import ContextLayout
from agentserve.contracts.segments import SegmentedPrompt
from agentserve.scheduler.sessions import Session
from agentserve.scheduler.tail_blocks import Tail


@dataclass
class RunningTurn:
    session: Session
    prompt: list[int]
    sampling: SamplingParams
    index: int
    retries_left: int
    span: Span
    turn_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    output: list[int] = field(default_factory=list)
    committed: bool = False
    decode_engine: str = ""  # the decode engine the turn's KV went to (the session's next KV holder)
    segments: SegmentedPrompt | None = None  # the prompt's shared blocks (an all-gather round's turn)
    decode_address: str = ""
    # The decode engine that relayed the turn's path-B reads when not its decode engine: it keeps
    # what it relays (`RelaySender`), so the turn's end drops the KV there too.
    relay_address: str = ""
    prompt_blocks: list[bytes] = field(default_factory=list)  # the prompt's full blocks' ids
    claim: tuple[str, list[bytes]] | None = None  # (decode address, blocks) claimed in `DecodeClaims`
    context_tail: Tail | None = None  # the history's stored tail: loaded if `tail_tokens`, garbage after the turn
    tail_tokens: int = 0  # prompt tokens after the store hits that the prefill loads with the tail
    client_state: dict[str, Any] | None = None  # the front's progress once the turn is in, saved with its commit
    context: ContextLayout | None = None  # the prompt's reused KV as the prefill stored it (TokenDance)
