"""DecodeClaims: the blocks turns in flight need on their decode engine, which no drop may take.

With `session_kv=store` a turn's decode engine drops the turn's KV at its end (`TurnRunner`). Every
agent's prompt starts with the same blocks (a shared system prompt and tools), so another turn
placed on that engine may need some of them: its prefill asked the engine which blocks it holds
and handed off only the rest (the suffix-only handoff), or handed them off already and the decode
has not admitted them yet. Dropping them then makes the decode engine recompute them: exact output,
but a long shared prefix computed on a decode engine stalls every sequence it decodes for as long
as the prefill takes, so the decode's TPOT grows by that much (docs/dualpath.md).

A turn claims its prompt's blocks on its decode engine when it is placed, before its prefill asks
the engine what it holds, and releases them at its end; a drop leaves out the blocks another
turn claims there. A drop already sent when a later turn is placed may still race that turn's
lookup, but the lookup comes after the turn's whole prefill, the drop at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


class DecodeClaims:
    def __init__(self) -> None:
        self._claims: dict[str, Counter[bytes]] = {}

    def claim(self, address: str, block_ids: Sequence[bytes]) -> None:
        """A turn on the decode engine at `address` needs `block_ids` there until `release`."""
        self._claims.setdefault(address, Counter()).update(block_ids)

    def release(self, address: str, block_ids: Sequence[bytes]) -> None:
        """Undo one `claim(address, block_ids)`."""
        claims = self._claims.get(address)
        if claims is None:
            return
        for block_id in block_ids:
            left = claims.get(block_id, 0) - 1
            if left > 0:
                claims[block_id] = left
            else:
                claims.pop(block_id, None)
        if not claims:
            del self._claims[address]

    def unclaimed(self, address: str, block_ids: Sequence[bytes]) -> list[bytes]:
        """Those of `block_ids` no turn claims on `address`, in order: what a drop may take."""
        claims = self._claims.get(address)
        if not claims:
            return list(block_ids)
        return [block_id for block_id in block_ids if block_id not in claims]

    def held_prefix(self, address: str, block_ids: Sequence[bytes]) -> int:
        """How many leading `block_ids` turns in flight claim on `address`: blocks that engine holds
        (or is about to, from a handoff), which it relays from HBM rather than reading the store."""
        claims = self._claims.get(address)
        held = 0
        while claims and held < len(block_ids) and block_ids[held] in claims:
            held += 1
        return held

    def claimed(self, address: str) -> int:
        """Distinct blocks claimed on `address` (0 once every claim there is released)."""
        return len(self._claims.get(address, ()))
