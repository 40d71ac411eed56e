"""KVLedger: the durable part of what a scheduler knows of a session's KV, kept in etcd beside the
session's record (`--state etcd`), so whichever scheduler runs the session's next turn finds the
KV where the last turn left it instead of recomputing it.

- `holder`: the decode engine whose pool holds the history's KV. Engines are shared by every
  scheduler (shared_engines.py), so a scheduler that takes the session over places its next turn
  there while it is alive, and the prefill hands it only the blocks it lacks.
- `context`: the last turn's prompt KV as the store holds it after reusing shared blocks
  (TokenDance, `contracts/context.py`). Reused KV is stored under block ids of its own, which
  nothing derives from the history; without the layout a new home would prefill that history again.

What the store holds under the history's chained block ids needs no entry: any scheduler computes
those ids from the history in the record and asks the store (`turn_kv.py`). Everything else a
scheduler tracks of KV (claims, parked uploads, tool waits) lives only as long as the turns and
waits that made it, on the scheduler that runs them.

The ledger is written in the transaction that commits the turn (`SessionDirectory.commit`), so
its key's mod revision equals the record's; a ledger at another revision than the record it is
read with is from no committed turn of that record, and is ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentserve.contracts.context import ContextLayout, Piece


@dataclass(frozen=True)
class KVLedger:
    holder: str = ""  # the decode engine's id; "" when no engine keeps it
    context: ContextLayout | None = None

    def encode(self) -> bytes:
        fields = {"holder": self.holder, "context": _layout_json(self.context)}
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> KVLedger:
        fields = json.loads(data)
        return cls(fields.get("holder", ""), _layout_of(fields.get("context")))


def _layout_json(layout: ContextLayout | None) -> dict[str, Any] | None:
    if layout is None:
        return None
    return {
        "num_tokens": layout.num_tokens,
        "tokens_digest": layout.tokens_digest.hex(),
        "pieces": [[p.start, p.end, p.block_id.hex(), (p.master_id or b"").hex()] for p in layout.pieces],
    }


def _layout_of(fields: dict[str, Any] | None) -> ContextLayout | None:
    if fields is None:
        return None
    pieces = tuple(
        Piece(start, end, bytes.fromhex(block), bytes.fromhex(master) or None)
        for start, end, block, master in fields["pieces"]
    )
    return ContextLayout(fields["num_tokens"], pieces, bytes.fromhex(fields["tokens_digest"]))
