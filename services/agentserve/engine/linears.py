"""How the engine stores and runs its linear layers on the CPU.

Three changes from a plain `nn.Linear`, none visible in parameter names or values, so Hugging
Face checkpoints load unchanged:

- **Column-major storage.** A weight keeps its `[out, in]` shape but is laid out `[in, out]` in
  memory, the layout both CPU GEMM libraries read fastest here: MKL's one-row matmul (decode, the
  LM head) reads a column-major weight ~3x faster than a row-major one.
- **Kernel by row count** (`linear`). MKL's sgemm repacks the whole weight on every call, which
  dominates when only a few dozen rows multiply it (a prefill on top of a cached prefix, a decode
  batch): oneDNN's matmul reads the weight in place and is ~30% faster there with the weights
  not in cache. Above `ONEDNN_MAX_ROWS` rows the repacking is amortised (MKL within ~12%), and
  oneDNN builds a primitive per distinct row count (~0.4 ms each, cached up to 1024), so
  bounding the row counts it sees keeps a long-running server from churning that cache.
- **Fusion** (`FusedLinear`): linears over the same input (q|k|v, gate|up) run as one matmul.
  The parts' parameters become views into the fused tensor, so each weight is stored once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Largest row count sent to oneDNN; 256 row counts x 4 weight shapes fill its primitive cache.
ONEDNN_MAX_ROWS = 256
# fp32 only: that is what the parity tests pin down, and oneDNN has no fp16 matmul on most CPUs.
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear` on the kernel that is fastest for this many rows (see the module docstring)."""
    if _ONEDNN and x.dtype == torch.float32 and 1 < x.shape[0] <= ONEDNN_MAX_ROWS:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """The same `[out, in]` matrix, laid out `[in, out]` in memory (a view of a contiguous transpose)."""
    return weight.detach().t().contiguous().t()


def store_column_major(linear: nn.Linear) -> None:
    linear.weight = nn.Parameter(column_major(linear.weight), requires_grad=linear.weight.requires_grad)


class FusedLinear(nn.Module):
    """Output is the parts' outputs concatenated along the last dim, in the order given."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, *parts: nn.Linear):
        super().__init__()
        if len({p.in_features for p in parts}) != 1:
            raise ValueError("fused linears must share their input size")
        if len({p.bias is None for p in parts}) != 1:
            raise ValueError("fused linears must all have a bias or all have none")
        # A tuple, not a ModuleList: registered parts would appear twice in the state dict.
        self._parts = parts
        self.register_buffer("weight", torch.empty(0), persistent=False)
        self.register_buffer("bias", None, persistent=False)
        self.fuse()

    def fuse(self) -> None:
        """(Re)build the fused tensors from the parts and point the parts' parameters into them.

        Needed again whenever a part's parameter is replaced rather than written into, as
        `load_state_dict(assign=True)` and `Module.to()` do.
        """
        with torch.no_grad():
            self.weight = column_major(torch.cat([p.weight for p in self._parts]))
            self.bias = None if self._parts[0].bias is None else torch.cat([p.bias for p in self._parts])
        start = 0
        for part in self._parts:
            rows = slice(start, start + part.out_features)
            part.weight = nn.Parameter(self.weight[rows], requires_grad=part.weight.requires_grad)
            if self.bias is not None:
                part.bias = nn.Parameter(self.bias[rows], requires_grad=part.bias.requires_grad)
            start = rows.stop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
