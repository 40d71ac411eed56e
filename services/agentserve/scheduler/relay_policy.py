"""Relay policies: which decode engine reads a turn's path-B blocks and relays them to the prefill.

Path B reads store blocks over a decode engine's storage NIC and sends them to the prefill engine
over that decode engine's compute NIC. Any decode engine can do it; the turn's own decode engine
has one advantage: it keeps the relayed blocks, so the handoff after the prefill skips them.

What a relay reads (`relay_source`, scheduler setting, the policy's `hbm_first`):
- `store` (default, DualPath's path B): every block it relays, from the store over its storage NIC,
  whatever it holds already. So path B adds storage bandwidth and nothing else: the baseline's
  path A cannot use a decode engine's HBM either.
- `hbm-first`: the leading blocks it holds already (the session's history on its KV holder, or a
  shared system prompt another turn in flight there brought) go from its HBM; it reads only the
  rest. Cheaper where decode engines keep sessions' KV, but not the paper's mechanism.

Which engine relays (`relay_policy`):
- `turn-decode`: always the turn's decode engine (the landed behaviour, and the paper's).
- `dualpath`: the decode engine that would finish the relay first. Relaying `n` bytes through `d`
  takes `max((snic_queue(d) + read(d)) / snic_rate(d), (cnic_queue(d) + n) / cnic_rate(d))`: the
  store read and the compute-network send overlap, so the slower of the two legs decides. `read(d)`
  is `n`, less what `d` holds (`held_bytes`) under `hbm-first`. Ties (at low load mostly every
  queue empty) go to the storage NIC that carried fewer read bytes lately (`Engine.recent_bytes`),
  so the decode side's NICs share path B evenly, then to the turn's decode engine (no extra
  handoff), then engine id. A turn without a KV holder is then decoded by its relay if that is as
  lightly loaded as the router's choice (`GlobalScheduler`).
- `other-decode`: never the turn's decode engine while another decode engine is alive (the least
  busy storage NIC among the others): the other end of a comparison, and it exercises a relay that
  is not the decode engine (its blocks must then be handed off as well).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from agentserve.common.config import check_choice
from agentserve.scheduler.registry import Engine


@dataclass(frozen=True)
class RelayChoice:
    engine: Engine
    reason: str  # recorded on the turn's span and in metrics


RELAY_SOURCES = ("store", "hbm-first")  # what a relay reads: see the module docstring


class RelayPolicy(Protocol):
    name: str
    # Whether a turn without a KV holder may be decoded by its relay when that is as lightly loaded
    # as the router's choice (the relay keeps what it relays, so the handoff skips those blocks).
    decode_follows_relay: bool
    # `relay_source=hbm-first`: a relay sends the leading blocks it holds from its HBM; else it reads
    # every block it relays from the store.
    hbm_first: bool

    def pick(
        self,
        decodes: Sequence[Engine],
        turn_decode: Engine,
        nbytes: int,
        held_bytes: Mapping[str, int] | None = None,
    ) -> RelayChoice:
        """The relay for `nbytes` of path-B blocks, among `decodes` (alive, never empty, including
        `turn_decode`); `held_bytes`, by engine id, the bytes of those blocks a decode engine would
        send from its HBM (only under `hbm_first`). On the event loop; no blocking."""
        ...


class _Relay:
    def __init__(self, hbm_first: bool = False) -> None:
        self.hbm_first = hbm_first


class TurnDecodeRelay(_Relay):
    name = "turn-decode"
    decode_follows_relay = False  # the relay is the turn's decode engine already

    def pick(
        self,
        decodes: Sequence[Engine],
        turn_decode: Engine,
        nbytes: int,
        held_bytes: Mapping[str, int] | None = None,
    ) -> RelayChoice:
        return RelayChoice(turn_decode, "turn-decode")


class DualPathRelay(_Relay):
    name = "dualpath"
    decode_follows_relay = True

    def pick(
        self,
        decodes: Sequence[Engine],
        turn_decode: Engine,
        nbytes: int,
        held_bytes: Mapping[str, int] | None = None,
    ) -> RelayChoice:
        held = held_bytes or {}

        def finish_s(d: Engine) -> float:
            send_s = (d.cnic_queue_bytes + nbytes) / d.bytes_per_s("cnic")
            read = nbytes - min(nbytes, held.get(d.engine_id, 0))  # what it holds goes from its HBM
            if not read:
                return send_s  # no store read: its storage queue does not hold this relay up
            return max((d.snic_queue_bytes + read) / d.bytes_per_s("snic"), send_s)

        best = min(
            decodes,
            key=lambda d: (finish_s(d), d.recent_bytes("snic"), d.engine_id != turn_decode.engine_id, d.engine_id),
        )
        if best.engine_id == turn_decode.engine_id:
            return RelayChoice(best, "turn-decode")
        # Finishing with the turn's decode engine, it won on bytes read lately.
        return RelayChoice(best, "least-read" if finish_s(best) == finish_s(turn_decode) else "earliest-finish")


class OtherDecodeRelay(_Relay):
    name = "other-decode"
    decode_follows_relay = False  # its point is a relay that is not the decode engine

    def pick(
        self,
        decodes: Sequence[Engine],
        turn_decode: Engine,
        nbytes: int,
        held_bytes: Mapping[str, int] | None = None,
    ) -> RelayChoice:
        others = [d for d in decodes if d.engine_id != turn_decode.engine_id]
        if not others:
            return RelayChoice(turn_decode, "only-decode")
        return RelayChoice(min(others, key=lambda d: (d.queue_s("snic"), d.snic_queue_bytes, d.engine_id)), "other")


RELAY_POLICIES: dict[str, type] = {p.name: p for p in (TurnDecodeRelay, DualPathRelay, OtherDecodeRelay)}


def make_relay_policy(name: str, source: str = "store") -> RelayPolicy:
    """The policy called `name` (turn-decode, dualpath, other-decode) whose relays read `source`
    (store, hbm-first); ValueError names the choices."""
    check_choice("relay_source", source, RELAY_SOURCES)
    check_choice("relay_policy", name, RELAY_POLICIES)
    policy: RelayPolicy = RELAY_POLICIES[name](hbm_first=source == "hbm-first")
    return policy
