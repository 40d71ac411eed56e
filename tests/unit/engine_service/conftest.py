"""Shared fixtures of the KV-move tests: blocks a real engine computed, as the store holds them."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine_service.relay import RELAY_RUN_BLOCKS
from tests.support.engine_pool import CONFIG

STORE_BLOCKS = 2 * RELAY_RUN_BLOCKS


@pytest.fixture(scope="package")
def source(tiny_model_dir):
    """(engine, ids, id -> stored bytes) for STORE_BLOCKS + 4 blocks the engine computed."""
    engine = LLMEngine.from_dir(tiny_model_dir, CONFIG)
    prompt = [(7 * i) % 200 + 3 for i in range((STORE_BLOCKS + 4) * engine.block_size + 1)]
    engine.generate(prompt, SamplingParams(max_tokens=1))
    ids = engine.block_ids_for(prompt)[: STORE_BLOCKS + 4]
    return engine, ids, {block_id: bytes(engine.export_blocks([block_id])) for block_id in ids}
