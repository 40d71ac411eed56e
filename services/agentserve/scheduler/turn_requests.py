"""The two engine requests of a turn, built from its state: the prefill of its prompt, and the
decode of the rest of its output after what it has so far."""

from __future__ import annotations

import dataclasses

from agentserve.contracts import GenerateRequest, PrefillRequest
from agentserve.scheduler.placement import Placement
from agentserve.scheduler.running_turn import RunningTurn
from agentserve.scheduler.turn_ports import TurnPolicy


def prefill_request(turn: RunningTurn, placed: Placement, hits: int, policy: TurnPolicy) -> PrefillRequest:
    """Prefill the turn's prompt over its `hits` store hits (and the tail it loads), by `placed`'s
    plan, handing the KV to `placed`'s decode engine."""
    return PrefillRequest(
        request_id=turn.turn_id,
        session_id=turn.session.session_id,
        tenant=turn.session.tenant,
        token_ids=turn.prompt,
        sampling=turn.sampling,
        store_hit_blocks=hits,
        decode_address=placed.decode.address,
        plan=placed.plan,
        segments=turn.segments,
        priority=policy.priority_of(turn.session),
        store_tail_tokens=turn.tail_tokens,
        service_rank=policy.turn_order.rank(turn.session),
        context=turn.session.context if turn.segments is not None and not turn.segments.reuse.exact else None,
    )


def generate_request(turn: RunningTurn, policy: TurnPolicy, persist_tail: bool) -> GenerateRequest:
    """Decode the rest of the turn after its output so far (the budget and min_tokens left);
    `persist_tail`: the decode engine stores the context's partial last block at the end."""
    return GenerateRequest(
        request_id=turn.turn_id,
        session_id=turn.session.session_id,
        tenant=turn.session.tenant,
        token_ids=turn.prompt + turn.output,
        prompt_tokens=len(turn.prompt),
        sampling=dataclasses.replace(
            turn.sampling,
            max_tokens=turn.sampling.max_tokens - len(turn.output),
            min_tokens=max(0, turn.sampling.min_tokens - len(turn.output)),
        ),
        priority=policy.priority_of(turn.session),
        persist_tail=persist_tail,
        context=turn.context,
    )
