"""Shared engine fixtures. `tiny_model_dir` is built once per session: other engine tests reuse it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentserve.engine.model_init import init_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Llama model (seed 0) in Hugging Face format. Treat it as read-only."""
    return init_model(tmp_path_factory.mktemp("tiny"), "tiny", seed=0)
