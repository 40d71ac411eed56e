"""Mooncake traces (`timestamp` ms, `input_length`, `output_length`, 512-token chained `hash_ids`).

Each request becomes a one-turn session arriving at its timestamp with a hash-based prompt. A
request whose prompt extends an earlier one (the earlier prompt's whole 512-token blocks, at least
two so a shared system prompt alone does not count, are a prefix of its hash ids) continues that
conversation: it is labelled a later turn and, with `chain=True`, waits for the request it
extends, as a user waits for an answer before the follow-up.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentserve.bench.common.workloads.model import Session, Turn, Workload

MOONCAKE_BLOCK_TOKENS = 512
MIN_PARENT_BLOCKS = 2


def read_mooncake(path: Path, limit: int | None = None, chain: bool = True) -> Workload:
    sessions: list[Session] = []
    # Chained ids: the id of a request's last whole block names its whole prefix.
    ends: dict[int, tuple[str, int]] = {}  # last whole block id -> (session id, whole blocks)
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(sessions) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                timestamp_ms = float(row["timestamp"])
                input_tokens, output_tokens = int(row["input_length"]), int(row["output_length"])
                hash_ids = tuple(int(h) for h in row["hash_ids"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a Mooncake record: {exc!r}") from None
            if len(hash_ids) * MOONCAKE_BLOCK_TOKENS < input_tokens:
                raise ValueError(f"{path}:{lineno}: {input_tokens} tokens but only {len(hash_ids)} hash ids")
            session_id = f"mc-{len(sessions):06d}"
            parent = _parent(hash_ids, ends)
            turn = Turn(
                output_tokens=max(1, output_tokens),
                hash_ids=hash_ids,
                input_tokens=input_tokens,
                label="later" if parent else "first",
            )
            sessions.append(
                Session(
                    session_id,
                    (turn,),
                    arrival_s=timestamp_ms / 1000.0,
                    tenant="mooncake",
                    after=(parent,) if parent and chain else (),
                )
            )
            whole = input_tokens // MOONCAKE_BLOCK_TOKENS
            if whole >= MIN_PARENT_BLOCKS:
                ends[hash_ids[whole - 1]] = (session_id, whole)
    return Workload(
        name=Path(path).stem,
        sessions=tuple(sessions),
        source=f"mooncake:{Path(path).name}",
        hash_block_tokens=MOONCAKE_BLOCK_TOKENS,
    )


def _parent(hash_ids: tuple[int, ...], ends: dict[int, tuple[str, int]]) -> str | None:
    """The latest earlier request with the longest whole-block prefix of `hash_ids`."""
    for k in range(len(hash_ids), MIN_PARENT_BLOCKS - 1, -1):
        found = ends.get(hash_ids[k - 1])
        if found is not None and found[1] == k:
            return found[0]
    return None
