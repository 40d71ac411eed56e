"""`PrefillKernels` runs a prefill's own matmul and attention kernels, shape for shape."""

from __future__ import annotations

import pytest
from torch.profiler import profile

from agentserve.bench.micro.prefill_kernels import PrefillKernels
from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

pytestmark = pytest.mark.unit

# A few-row gate|up product runs as one batched matmul over its halves (`linears.gate_up_halves`).
KERNELS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu")


def _kernel_calls(fn) -> list[tuple[str, list]]:
    with profile(record_shapes=True) as prof:
        fn()
    return [(e.name, e.input_shapes) for e in prof.events() if e.name in KERNELS]


@pytest.mark.parametrize(("new", "cached"), [(48, 0), (40, 960)])
def test_kernels_are_the_prefills_own(tiny_model_dir, new: int, cached: int) -> None:
    engine = LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=64 << 20))
    prompt = [5 + i % 97 for i in range(cached + new)]
    if cached:
        engine.generate(prompt[:cached] + [7] * 20, SamplingParams(max_tokens=1))
    seqs = []
    real = _kernel_calls(lambda: seqs.append(engine.generate(prompt, SamplingParams(max_tokens=1))))
    assert seqs[0].num_cached_tokens == cached
    alone = _kernel_calls(PrefillKernels(engine.model, new, cached).run)
    assert alone == real and len(real) == engine.model_config.num_hidden_layers * (4 + (2 if cached else 1)) + 1
