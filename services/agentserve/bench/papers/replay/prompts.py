"""What a turn sends: its whole prompt's token ids, whether it continues the server session, and
how much of it the workload says is reusable.

A session's context is its previous prompt plus the output the server generated for it (kept by
the replayer, token for token). A turn that reuses all of it continues the server session and
sends only its new tokens (the server appends them to its own copy of the history); a turn that
reuses less (a recorded cache miss, a compaction) or whose prompt is made from hash ids starts a
fresh server session with the whole prompt, so the server sees exactly the recorded prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentserve.bench.common.workloads.model import Session, Workload
from agentserve.bench.common.workloads.reuse import HashReuse, trace_reuse
from agentserve.bench.common.workloads.tokens import TokenSynth


@dataclass(frozen=True)
class PlannedPrompt:
    tokens: list[int]
    continues: bool  # tokens = context + new: send only tokens[len(context):] on the same server session
    reusable: int  # leading tokens the workload says may come from cache, given what finished so far
    trace_reusable: int  # the same, as the recorded trace has it


@dataclass
class SessionState:
    """The replayer's copy of one session's context."""

    session: Session
    context: list[int] = field(default_factory=list)


class PromptPlanner:
    def __init__(self, workload: Workload, synth: TokenSynth) -> None:
        self.workload = workload
        self.synth = synth
        self.finished_hashes = HashReuse()
        # The trace's own reuse: every hash-based prompt against all earlier ones, in arrival order.
        hashed = [
            (s.id, i, t)
            for s in sorted(workload.sessions, key=lambda s: s.arrival_s)
            for i, t in enumerate(s.turns)
            if t.hash_based
        ]
        reuse = trace_reuse([(t.hash_ids, t.input_tokens) for _, _, t in hashed], workload.hash_block_tokens)
        self._trace_reuse = {(sid, i): r for (sid, i, _), r in zip(hashed, reuse)}

    def start(self, session: Session) -> SessionState:
        state = SessionState(session)
        if session.prefix is not None:
            state.context = self.synth.prefix(session.prefix, self.workload.prefixes[session.prefix])
        return state

    def plan(self, state: SessionState, index: int, has_server_session: bool) -> PlannedPrompt:
        session, turn = state.session, state.session.turns[index]
        if turn.hash_based:
            tokens = self.synth.hashed_prompt(turn.hash_ids, turn.input_tokens, self.workload.hash_block_tokens)
            reusable = self.finished_hashes.reusable(turn.hash_ids, turn.input_tokens, self.workload.hash_block_tokens)
            return PlannedPrompt(tokens, False, reusable, self._trace_reuse[(session.id, index)])
        context = state.context
        keep = len(context) if turn.reuse_tokens is None else min(turn.reuse_tokens, len(context))
        key = turn.content_key or f"{session.id}#{index}"
        tokens = context[:keep] + self.synth.message(key, turn.new_tokens)
        # A first turn over a shared prefix has no server session yet: it sends the whole prompt.
        continues = has_server_session and keep == len(context)
        return PlannedPrompt(tokens, continues, keep, keep)

    def finished(self, state: SessionState, index: int, prompt: list[int], output: list[int]) -> None:
        """Record a completed turn: the context grows by its output; its hash blocks are cached."""
        turn = state.session.turns[index]
        state.context = prompt + output
        if turn.hash_based:
            self.finished_hashes.observe(turn.hash_ids, turn.input_tokens, self.workload.hash_block_tokens)
