"""The embedded default model: built once on first use, cached on disk, reused by every command."""

from __future__ import annotations

from pathlib import Path

from agentserve.engine import model_init
from agentserve.engine.model_init import init_model, trained_weights_path
from agentserve.model_files.tokenizer_files import build_once, files_digest, models_home


def ensure_default_model(preset: str = "tiny", seed: int | None = None, agent: bool = False) -> Path:
    """Path of the default model folder, writing it first if absent (crash-safe: `build_once`).

    `seed=None` (what every service and command uses) is the trained model; a seed gives random
    weights, as `init_model` documents; `agent` gives the agent weights (`AGENT_WEIGHTS`).
    """
    if agent:
        weights = [trained_weights_path(preset, agent=True)]
        target = models_home() / f"{preset}-agent-{files_digest(Path(model_init.__file__), *weights)}"
        return build_once(target, "config.json", lambda staging: init_model(staging, preset=preset, agent=True))
    if seed is None:
        name, weights = f"{preset}-trained", [trained_weights_path(preset)]
    else:
        name, weights = f"{preset}-seed{seed}", []
    target = models_home() / f"{name}-{files_digest(Path(model_init.__file__), *weights)}"
    return build_once(target, "config.json", lambda staging: init_model(staging, preset=preset, seed=seed))
