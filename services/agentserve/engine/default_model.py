"""The embedded default model: built once on first use, cached on disk, reused by every command."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from agentserve.engine import model_init
from agentserve.engine.model_init import init_model
from agentserve.model_files.tokenizer_files import files_digest, models_home


def ensure_default_model(preset: str = "tiny", seed: int = 0) -> Path:
    """Path of the default model folder, writing it first if absent.

    Built in a temporary folder and renamed into place, so a crash mid-write never leaves a
    half-written model that later runs would load.
    """
    target = models_home() / f"{preset}-seed{seed}-{files_digest(Path(model_init.__file__))}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{preset}-", dir=target.parent))
    try:
        init_model(staging, preset=preset, seed=seed)
        try:
            staging.rename(target)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
