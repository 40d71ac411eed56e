"""PrefillConfig: the settings a prefill engine process runs with (`--flags` / `AGENTSERVE_*` env)."""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.engine_service.config import EngineServiceConfig
from agentserve.prefill.load_lanes import DEFAULT_LOAD_ORDER, LoadOrder, check_load_order


@dataclass(frozen=True)
class PrefillConfig(EngineServiceConfig):
    prog = "agentserve.prefill"
    # False: a turn's prompt blocks leave the pool once persisted and handed off, so the session's
    # next turn reads its history from the store (DualPath's regime at scale, where by an agent's
    # next turn the other agents' contexts have pushed its KV out of the prefill engine's HBM).
    keep_kv: bool = True
    # concurrent: the engine's loads all start at once; fifo: they take the store (and each relay)
    # one at a time in arrival order (no faster in `bench dualpath`; see prefill/load_lanes.py).
    load_order: LoadOrder = DEFAULT_LOAD_ORDER

    def __post_init__(self) -> None:
        super().__post_init__()
        check_load_order(self.load_order)
