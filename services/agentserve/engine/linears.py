"""How the engine stores and runs its linear layers on the CPU.

Two changes from a plain `nn.Linear`, none visible in parameter names or values, so Hugging Face
checkpoints load unchanged:

- **Column-major storage.** A weight keeps its `[out, in]` shape but is laid out `[in, out]` in
  memory, the layout MKL's GEMM reads fastest here: its one-row matmul (decode, the LM head)
  reads a column-major weight ~3x faster than a row-major one, and it is ~5-20% faster at a few
  dozen rows (a prefill on top of a cached prefix).
- **Fusion** (`FusedLinear`): linears over the same input (q|k|v, gate|up) run as one matmul.
  The parts' parameters become views into the fused tensor, so each weight is stored once.

**Row invariance** (`row_invariant_linear`): MKL computes a product of 1 to 3 rows with another
kernel than 4 or more, summing each output in another order, so the same token's row comes out
different in its low bits alone (a decode of one sequence) and batched (a decode of four, a
prefill). Rounding the row count up to a multiple of `ROW_TILE` with zero rows sends every row
through the many-row kernel, whose result for a row does not depend on the rows beside it or on
the thread count (tests/unit/engine/test_linears.py checks this on the machine it runs on).

**Gate and up on both threads** (`gate_up_halves`): MKL runs a product of a few dozen rows (a
prefill on top of a cached prefix, a decode step) on one thread however many it has. The fused
gate|up product is two equal halves the activation takes apart anyway, so up to `SLAB_MAX_ROWS`
rows it runs as one batched matmul over the two, which MKL spreads over its threads; each half is
the same kernel summing the same terms, so the bits are `row_invariant_linear`'s (tested). On two
threads the product and activation take about a fifth less time, on one the same. The other
projections stay whole: re-joining their halves would cost what the slabs gain.

**The LM head in slabs** (`head_linear`): MKL runs the product of a few rows with the tied head
(8 MB at the default model's 8192 x 256) on one thread, at memory speed, which is an eighth of a
cached prefill. Up to `SLAB_MAX_ROWS` rows it runs as one batched matmul over `HEAD_SLABS` column
slabs of at most 1 MB each (a core's L2), which MKL spreads over its threads: about half the time
on two threads, the same bits (tested). Its output is re-joined (a [rows, vocab] copy of a few
microseconds), unlike the projections' (their weights are 4-16x smaller, so the copy eats the gain).

Every other product runs on `F.linear` (MKL), not oneDNN's matmul: for few-row inputs oneDNN spends
several times MKL's fixed cost per call before any arithmetic (16 calls a forward) and is no faster
on the arithmetic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# Rows a linear's input is padded to a multiple of (see the module docstring).
ROW_TILE = 4
# Rows up to which `gate_up_halves` and `head_linear` run their slabs as a batch (see the module docstring).
SLAB_MAX_ROWS = 64
# Column slabs of the LM head: 8 keeps each slab of the default model's head within 1 MB.
HEAD_SLABS = 8


def row_invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for `x` `[rows, in]`, each row's result independent of the others."""
    rows = x.shape[0]
    pad = -rows % ROW_TILE
    if not pad:
        return F.linear(x, weight, bias)
    return F.linear(torch.cat([x, x.new_zeros(pad, x.shape[1])]), weight, bias)[:rows]


def column_slabs(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, slabs: int) -> torch.Tensor | None:
    """`row_invariant_linear(x, weight, bias)` as `[slabs, rows, out / slabs]`, its column slabs side
    by side, run as one batched matmul that MKL spreads over its threads; None where that does not
    apply (more than `SLAB_MAX_ROWS` rows, columns that do not split evenly, a row-major weight)."""
    rows, (n_out, n_in) = x.shape[0], weight.shape
    if rows > SLAB_MAX_ROWS or n_out % slabs or not weight.t().is_contiguous():
        return None
    width = n_out // slabs
    pad = -rows % ROW_TILE
    if pad:
        x = torch.cat([x, x.new_zeros(pad, n_in)])
    parts = weight.t().view(n_in, slabs, width).transpose(0, 1)  # [slabs, in, width], a view of the weight
    inputs = x.expand(slabs, *x.shape)
    out = torch.bmm(inputs, parts) if bias is None else torch.baddbmm(bias.view(slabs, 1, width), inputs, parts)
    return out[:, :rows]


def gate_up_halves(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, batch_invariant: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused gate|up product's two halves of columns: `row_invariant_linear`'s (`F.linear`'s if
    not `batch_invariant`), each half run on its own thread when `x` has few rows."""
    halves = column_slabs(x, weight, bias, 2) if batch_invariant else None
    if halves is None:
        out = (row_invariant_linear if batch_invariant else F.linear)(x, weight, bias)
        half = weight.shape[0] // 2
        return out[:, :half], out[:, half:]
    return halves[0], halves[1]


def head_linear(x: torch.Tensor, weight: torch.Tensor, batch_invariant: bool = True) -> torch.Tensor:
    """The LM head's product (no bias): `row_invariant_linear`'s bits, in `HEAD_SLABS` column slabs
    when `x` has few rows (`F.linear` if not `batch_invariant`)."""
    if not batch_invariant:
        return F.linear(x, weight)
    slabs = column_slabs(x, weight, None, HEAD_SLABS)
    if slabs is None:
        return row_invariant_linear(x, weight)
    return slabs.transpose(0, 1).reshape(x.shape[0], weight.shape[0])


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
        return F.linear(x, self.weight, self.bias)
