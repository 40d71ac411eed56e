"""DecodeConfig: the settings a decode engine process runs with (`--flags` / `AGENTSERVE_*` env)."""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.engine_service.config import EngineServiceConfig


@dataclass(frozen=True)
class DecodeConfig(EngineServiceConfig):
    prog = "agentserve.decode"
    grpc_port: int = 50054
