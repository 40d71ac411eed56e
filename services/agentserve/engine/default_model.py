"""The embedded default model: built once on first use, cached on disk, reused by every command."""

from __future__ import annotations

from pathlib import Path

from agentserve.engine import model_init
from agentserve.engine.model_init import init_model
from agentserve.model_files.tokenizer_files import build_once, files_digest, models_home


def ensure_default_model(preset: str = "tiny", seed: int = 0) -> Path:
    """Path of the default model folder, writing it first if absent (crash-safe: `build_once`)."""
    target = models_home() / f"{preset}-seed{seed}-{files_digest(Path(model_init.__file__))}"
    return build_once(target, "config.json", lambda staging: init_model(staging, preset=preset, seed=seed))
