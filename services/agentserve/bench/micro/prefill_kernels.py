"""A prefill's kernels alone: what `bench engine`'s cached-prefill speedup could reach with no overhead.

`PrefillKernels(model, new, cached)` runs, back to back on the model's own weights, exactly the
matrix kernels a prefill of `new` tokens over `cached` ones runs, with the same shapes and layouts:
per layer the fused q|k|v, o, gate|up and down projections (MKL, as `linears` runs them) and the attention
kernel the engine calls (`attend_with_prefix`'s two flash calls and merge over a cached prefix,
the causal flash kernel from scratch), then the LM head on the last row. Left out is everything
that is not one of those kernels: norms, rotary, residual adds, the activation, KV writes,
metadata and the engine's Python. The inputs are random (kernel time does not depend on values).
They sit on the model's device; on a GPU each clock reading waits for the queued kernels first.

Timing both prefills this way, side by side with the real ones, splits the cached side's shortfall
into what its small matrices cost (the kernels at 40 rows run slower per FLOP than at 1000) and
what the rest of a forward adds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.layer_plan import DenseMlp
from agentserve.engine.linears import gate_up_halves, head_linear, row_invariant_linear
from agentserve.engine.model import CausalLM
from agentserve.engine.prefix_attention import attend_with_prefix


class PrefillKernels:
    def __init__(self, model: CausalLM, new: int, cached: int, batch_invariant: bool = EngineConfig.batch_invariant):
        cfg = model.config
        # The engine's batch-invariant linears pad rows to a whole tile (the LM head's one row to
        # four), so the kernels alone must too to be the same shapes.
        self.linear = row_invariant_linear if batch_invariant else F.linear
        self.batch_invariant = batch_invariant
        dtype, device = model.lm_head.weight.dtype, model.lm_head.weight.device
        heads, kv_heads, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.model, self.cached, self.device = model, cached, device
        self.x = torch.randn(new, cfg.hidden_size, dtype=dtype, device=device)
        self.act = torch.randn(new, cfg.intermediate_size, dtype=dtype, device=device)
        self.q = torch.randn(new, heads, d, dtype=dtype, device=device)
        self.k = torch.randn(new, kv_heads, d, dtype=dtype, device=device)
        self.v = torch.randn(new, kv_heads, d, dtype=dtype, device=device)
        # The cached prefix as the pool holds it: `[tokens, kv_heads, d]` rows.
        self.prefix_k = torch.randn(cached, kv_heads, d, dtype=dtype, device=device)
        self.prefix_v = torch.randn(cached, kv_heads, d, dtype=dtype, device=device)
        self.head = model.head_weight

    @torch.inference_mode()
    def run(self) -> dict[str, float]:
        """Run the kernels once; seconds spent in the projections, the attention and the LM head."""
        x, q, k, v, linear = self.x, self.q, self.k, self.v, self.linear
        spent = {"linear": 0.0, "attention": 0.0, "lm_head": 0.0}
        clock = synced_clock(self.device)
        for plan in self.model.plans:
            start = clock()
            linear(x, *plan.qkv)
            mid = clock()
            if self.cached:
                out = attend_with_prefix(q, k, v, self.prefix_k, self.prefix_v)
            else:  # as `paged_attention` calls it: 4-D, so CPU SDPA takes the flash kernel
                groups = q.shape[1] // k.shape[1]
                out = F.scaled_dot_product_attention(
                    q.transpose(0, 1)[None],
                    k.transpose(0, 1)[None],
                    v.transpose(0, 1)[None],
                    is_causal=True,
                    enable_gqa=groups > 1,
                )[0].transpose(0, 1)
            attended = clock()
            linear(out.reshape(x.shape[0], -1), *plan.o_proj)
            if isinstance(plan.ffn, DenseMlp):
                gate_up_halves(x, *plan.ffn.gate_up, batch_invariant=self.batch_invariant)
                linear(self.act, *plan.ffn.down)
            else:  # a mixture of experts: routing and experts as the forward runs them
                plan.ffn(x, self.batch_invariant)
            end = clock()
            spent["linear"] += (mid - start) + (end - attended)
            spent["attention"] += attended - mid
        start = clock()
        head_linear(x[-1:], self.head, self.batch_invariant)
        spent["lm_head"] = clock() - start
        return spent


def synced_clock(device: torch.device) -> Callable[[], float]:
    """`time.perf_counter`, after the device's queued kernels have finished (a CPU runs them at once)."""
    if device.type != "cuda":
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock
