"""Fixtures every tier shares."""

from __future__ import annotations

import pytest

from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig


@pytest.fixture(scope="session")
def reference() -> LLMEngine:
    """The default model recomputing every prompt in this process (no prefix cache): the parity
    anchor that cached, relayed, handed-off and restored KV must match token for token."""
    return LLMEngine.from_dir(ensure_default_model(), EngineConfig(prefix_cache=False))
