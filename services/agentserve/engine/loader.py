"""Load a Hugging Face style model folder: config.json + *.safetensors (single or sharded), or a
Llama GGUF file through the folder it converts to (`agentserve.model_files.gguf_folder`).

Also computes the model fingerprint that salts every block id, so KV from one set of weights can
never be served to another.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open

from agentserve.engine.config import ModelConfig, parse_dtype
from agentserve.engine.model import CausalLM
from agentserve.model_files.gguf_folder import model_folder

# Above this size a checkpoint is fingerprinted from headers, sizes and sampled bytes rather than
# every byte, so start-up stays fast for real multi-GB checkpoints.
FULL_HASH_LIMIT = 1 << 30
SAMPLE_BYTES = 4 << 20
# Buffers HF keeps in some checkpoints that we recompute.
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def weight_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise ValueError(f"{index} is not a valid safetensors index: {exc}") from None
        files = sorted({model_dir / name for name in weight_map.values()})
    else:
        files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors weights in {model_dir}")
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"safetensors index names missing shard(s): {', '.join(missing)}")
    return files


def fingerprint(model_dir: Path, config: ModelConfig) -> str:
    """A short stable id of (architecture, weights)."""
    h = hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode())
    for path in weight_files(model_dir):
        size = path.stat().st_size
        h.update(f"{path.name}:{size}".encode())
        with path.open("rb") as f:
            if size <= FULL_HASH_LIMIT:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            else:
                h.update(f.read(SAMPLE_BYTES))
                f.seek(size - SAMPLE_BYTES)
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()[:16]


def load_state_dict(model_dir: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for path in weight_files(model_dir):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                if not name.endswith(IGNORED_SUFFIXES):
                    tensors[name] = f.get_tensor(name)
    return tensors


def load_model(model_dir: str | Path, dtype: str | torch.dtype = "fp32") -> tuple[CausalLM, str]:
    """Returns (model in eval mode with the requested dtype, fingerprint); `model_dir` may be a GGUF file."""
    model_dir = model_folder(model_dir)
    if not model_dir.is_dir():
        raise ValueError(f"model directory {model_dir} does not exist")
    config = ModelConfig.from_file(model_dir / "config.json")
    torch_dtype = parse_dtype(dtype)
    with torch.device("meta"):
        model = CausalLM(config)
    state = load_state_dict(model_dir)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = {name for name, _ in model.named_parameters()}
    missing = sorted(expected - state.keys())
    unexpected = sorted(state.keys() - expected)
    if missing or unexpected:
        raise ValueError(
            f"weights in {model_dir} do not match the {config.model_type} architecture: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    for name, param in model.named_parameters():
        if tuple(state[name].shape) != tuple(param.shape):
            raise ValueError(f"weight {name} has shape {tuple(state[name].shape)}, config implies {tuple(param.shape)}")
    model.load_state_dict({k: v.to(torch_dtype) for k, v in state.items()}, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # Fused projections and rope tables were created on the meta device; rebuild them for real.
    model.rebuild_derived()
    return model.eval(), fingerprint(model_dir, config)
