"""Where an engine's tensors live: the `device` setting (`EngineConfig.device`, `--device`).

`cpu` is the default and what CI runs. `cuda` / `cuda:N` put the weights, the KV pool and every
tensor a forward creates on that GPU; `auto` is `cuda` when torch sees a GPU, else `cpu`. The
setting is resolved once, when the config is built, so a machine without the asked-for GPU fails at
start-up with the flag's name rather than at the first forward.

Only what runs the model moves: token ids, slot tables and sampling stay on the host (a step's
logits come back to it, `ModelRunner`), and KV leaves and enters the pool through the block format
on the host (`serialize_blocks` copies to the CPU, `KVPool.write_blocks` to the pool's device).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the config validates the setting without importing the model
    from agentserve.engine.model import CausalLM

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_CUDA = re.compile(r"cuda(?::(\d+))?")


def resolve_device(value: str) -> torch.device:
    """The torch device `value` names (`auto`, `cpu`, `cuda`, `cuda:N`); a ValueError naming
    `device` (`--device`) for anything else, or for a GPU this machine does not have."""
    if not isinstance(value, str):
        raise ValueError(f"device (--device) must be {DEVICE_CHOICES}, got {value!r}")
    if value == "cpu":
        return torch.device("cpu")
    if value == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    match = _CUDA.fullmatch(value)
    if match is None:
        raise ValueError(f"device (--device) must be {DEVICE_CHOICES}, got {value!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device (--device) {value!r} asks for CUDA, but torch sees no CUDA GPU here")
    if match.group(1) is None:
        return torch.device("cuda")  # the current GPU
    index = int(match.group(1))
    if index >= torch.cuda.device_count():
        raise ValueError(f"device (--device) {value!r}: torch sees {torch.cuda.device_count()} CUDA GPU(s)")
    return torch.device("cuda", index)


def device_name(device: torch.device) -> str:
    """`cpu`, or the GPU with its model name (`cuda:0 (NVIDIA H100 80GB HBM3)`), for reports."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"


def model_device(model: CausalLM) -> torch.device:
    return model.model.embed_tokens.weight.device


def place_model(model: CausalLM, device: torch.device) -> CausalLM:
    """`model` with its weights on `device` (moved in place when elsewhere). The derived tensors
    (fused projections, column-major layouts, rotary tables) are rebuilt there, as after a load."""
    if _same_device(model_device(model), device):
        return model
    model.to(device)
    model.rebuild_derived()
    return model


def _same_device(have: torch.device, want: torch.device) -> bool:
    if have.type != want.type:
        return False
    # `cuda` means the current GPU: a tensor there reports its index.
    return want.index is None or have.index == want.index
