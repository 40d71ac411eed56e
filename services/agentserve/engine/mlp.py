"""MLP: a dense SwiGLU block's parameters under Hugging Face's names, and its `DenseMlp` plan.

The dense decoder layers of every architecture use it, and so do Qwen2-MoE's experts and shared
expert, which HF names the same way (`gate_proj`, `up_proj`, `down_proj`).
"""

from __future__ import annotations

from torch import nn

from agentserve.engine.layer_plan import DenseMlp
from agentserve.engine.linears import FusedLinear, store_column_major


class MLP(nn.Module):
    """Parameters only: `derive` gives the `DenseMlp` the forward pass runs."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.gate_up = FusedLinear(self.gate_proj, self.up_proj)

    def derive(self) -> DenseMlp:
        """Fuse gate|up, lay down_proj out column-major (`linears`), and plan the block."""
        self.gate_up.fuse()
        store_column_major(self.down_proj)
        down = self.down_proj
        return DenseMlp(gate_up=(self.gate_up.weight, self.gate_up.bias), down=(down.weight, down.bias))
