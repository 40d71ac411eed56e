"""The models a command serves, by name or by path (`--model`), and the one it serves by default.

Two names are in the catalog:

- `smollm2`: SmolLM2-135M-Instruct (Apache-2.0, a Llama model: 30 layers, hidden 576), the GGUF
  file `scripts/install.sh` fetches into the models cache (the images carry it at `/models`). An
  instruct model answers questions and calls tools well enough for a user to judge the replies, so
  it is what `up --local`, the demo and the compose deployment serve when no model is named.
- `tiny`: the embedded 4-layer model (`default_model.ensure_default_model`), built on first use.
  Tests and benchmarks that need its speed name it.
- `tiny-agent`: the same architecture trained further on generated agent transcripts, so it calls
  tools and ends with the final answer under the agent frameworks' defaults (their tests serve it).

Anything else is a path: an HF-style model folder or a Llama GGUF file. Nothing here downloads: a
catalog model that is not on disk is a ValueError naming the step that fetches it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agentserve.engine.default_model import ensure_default_model
from agentserve.model_files.gguf_folder import GGUF_SUFFIX, model_folder
from agentserve.model_files.tokenizer_files import models_home

TINY = "tiny"
TINY_AGENT = "tiny-agent"
SMOLLM2 = "smollm2"
SERVED_DEFAULT = SMOLLM2
TINY_NAME = "agentserve-tiny"  # the services' default model name (scheduler and engine configs)
TINY_AGENT_NAME = "agentserve-tiny-agent"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_FILE = f"{SMOLLM2_NAME}.Q4_1.gguf"


@dataclass(frozen=True)
class ServedModel:
    """A model to serve: the id clients name it by (OpenAI `model`, turn spans) and where it loads from."""

    name: str
    source: Path  # a GGUF file or an HF-style folder, as the services' --model-dir takes it


def smollm2_file() -> Path:
    """Where the install step puts SmolLM2-135M-Instruct's GGUF file."""
    return models_home() / SMOLLM2_FILE


def resolve_model(spec: str | None = None) -> ServedModel:
    """The model `spec` names (a catalog name or a path); None is `SERVED_DEFAULT`."""
    spec = spec or SERVED_DEFAULT
    if spec == TINY:
        return ServedModel(TINY_NAME, ensure_default_model())
    if spec == TINY_AGENT:
        return ServedModel(TINY_AGENT_NAME, ensure_default_model(agent=True))
    if spec == SMOLLM2:
        path = smollm2_file()
        if not path.is_file():
            raise ValueError(
                f"--model {SMOLLM2}: {path} does not exist; scripts/install.sh fetches it "
                f"(or name the embedded model: --model {TINY})"
            )
        return ServedModel(SMOLLM2_NAME, path)
    path = Path(spec)
    if not path.exists():
        raise ValueError(
            f"--model {spec!r} is neither a model of the catalog ({SMOLLM2}, {TINY}, {TINY_AGENT}) nor an existing path"
        )
    if path.is_file() and path.suffix.lower() == GGUF_SUFFIX:
        return ServedModel(SMOLLM2_NAME if path.name == SMOLLM2_FILE else path.stem, path)
    return ServedModel(path.name, path)


def describe(model: ServedModel, dtype: str) -> str:
    """One line saying which model serves: its name, the file it loads, its layers and the dtype.

    A GGUF file is converted here (once; later calls find the cached folder), so the services that
    start next all load the same finished folder.
    """
    config = json.loads((model_folder(model.source) / "config.json").read_text())
    return (
        f"model {model.name} from {model.source}: {config['num_hidden_layers']} layers, hidden "
        f"{config['hidden_size']}, vocabulary {config['vocab_size']}, served in {dtype}"
    )
