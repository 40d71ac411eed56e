"""`agentserve bench handoff`: compute-network bytes of the prefill -> decode handoff per turn of
one agent session, against what handing off the whole prompt would cost.

The decode engine that ran a session's previous turn still holds its KV (the scheduler routes the
session back to it), and one that relayed a path-B load keeps those blocks, so from turn 2 on the
prefill engine sends only the blocks the decode engine lacks: the turn's new ones. Figures are the
engines' own (TurnMetadata: handoff blocks and bytes, path taken), not estimates.
"""

from __future__ import annotations

import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from agentserve.sdk import Client

BLOCK_TOKENS = 16  # the engines' default block size


@dataclass(frozen=True)
class TurnHandoff:
    turn: int
    prompt_tokens: int
    kv_path: str
    decode_engine: str
    handoff_blocks: int
    held_blocks: int  # full prompt blocks the decode engine already held
    handoff_bytes: int
    full_handoff_bytes: int  # every full prompt block, as a decode engine holding nothing would need

    @property
    def ratio(self) -> float:
        return self.handoff_bytes / self.full_handoff_bytes if self.full_handoff_bytes else 0.0


def measure(
    client: Client,
    turns: int = 5,
    first_tokens: int = 480,
    new_tokens: int = 20,
    max_tokens: int = 12,
    seed: int = 0,
    tenant: str = "handoff-bench",
) -> list[TurnHandoff]:
    """Run one session of `turns` token-id turns; the handoff of each, from its metadata."""
    rng = random.Random(seed)
    rows: list[TurnHandoff] = []
    block_bytes = 0
    with client.open_session(tenant=tenant, agent="bench") as session:
        for i in range(turns):
            tokens = [rng.randrange(5, 8000) for _ in range(first_tokens if i == 0 else new_tokens)]
            meta = session.turn(token_ids=tokens, max_tokens=max_tokens, ignore_eos=True).result().metadata
            if meta is None:
                raise RuntimeError(f"turn {i + 1} streamed no metadata: its handoff is unknown")
            full_blocks = meta.prompt_tokens // BLOCK_TOKENS
            if meta.handoff_blocks:
                block_bytes = meta.handoff_bytes // meta.handoff_blocks  # every block serializes the same size
            rows.append(
                TurnHandoff(
                    i + 1,
                    meta.prompt_tokens,
                    meta.kv_path,
                    meta.decode_engine,
                    meta.handoff_blocks,
                    meta.handoff_held_blocks,
                    meta.handoff_bytes,
                    full_blocks * block_bytes,
                )
            )
    if not block_bytes:
        raise RuntimeError("no turn handed off any block: is the prompt shorter than a block?")
    # A turn that sent nothing learned no block size: fill in from the others.
    return [
        r
        if r.full_handoff_bytes
        else TurnHandoff(**{**asdict(r), "full_handoff_bytes": r.prompt_tokens // BLOCK_TOKENS * block_bytes})
        for r in rows
    ]


def report(rows: list[TurnHandoff], out: TextIO = sys.stdout) -> None:
    print(
        f"{'turn':>4} {'prompt':>7} {'path':>5} {'sent':>5} {'held':>5} {'handoff bytes':>14} "
        f"{'full handoff':>13} {'ratio':>7}",
        file=out,
    )
    for r in rows:
        print(
            f"{r.turn:>4} {r.prompt_tokens:>7} {r.kv_path:>5} {r.handoff_blocks:>5} {r.held_blocks:>5} "
            f"{r.handoff_bytes:>14,} {r.full_handoff_bytes:>13,} {r.ratio:>7.1%}",
            file=out,
        )


def run(
    address: str | None = None,
    turns: int = 5,
    profile: str = "local-unshaped",
    kv_path_policy: str = "dualpath",
    log_dir: Path | None = None,
) -> dict:
    """Against the scheduler at `address`, or a fresh local cluster (`agentserve up --local`) if None."""
    cluster = None
    if address is None:
        import tempfile

        from agentserve.cluster.local import LocalCluster
        from agentserve.cluster.ports import LocalPorts
        from agentserve.cluster.settings import FabricSettings

        work = Path(tempfile.mkdtemp(prefix="agentserve-handoff-bench-"))
        cluster = LocalCluster(
            LocalPorts.free(2),
            decoders=2,
            data_dir=work / "kv",
            log_dir=log_dir or work / "logs",
            fabric=FabricSettings(profile, kv_path_policy),
        )
        print(
            f"starting a local cluster (fabric {profile}, kv paths {kv_path_policy}; logs in {cluster.log_dir})",
            file=sys.stderr,
        )
        cluster.start()
        address = f"127.0.0.1:{cluster.ports.scheduler}"  # where it listens: a taken free port moves
    try:
        with Client(address, timeout_s=120) as client:
            rows = measure(client, turns=turns)
    finally:
        if cluster is not None:
            cluster.stop()
    report(rows, out=sys.stderr)
    later = rows[1:]
    return {
        "turns": [dict(asdict(r), ratio=round(r.ratio, 4)) for r in rows],
        "first_turn_handoff_bytes": rows[0].handoff_bytes,
        "later_turns_max_ratio": round(max((r.ratio for r in later), default=0.0), 4),
    }
