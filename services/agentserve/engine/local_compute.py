"""LocalCompute: what a hardware profile is scaled against, this machine's prefill speed and KV size,
measured on a real engine (`agentserve.fabric.profiles` scales the target's bandwidths by it)."""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from agentserve.contracts import SamplingParams
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig


@dataclass(frozen=True)
class LocalCompute:
    kv_bytes_per_token: int  # K and V of every layer, in the engine's KV dtype
    prefill_tokens_per_s: float  # one engine, one sequence, from scratch


def measure_local_compute(
    model_dir: Path | None = None, dtype: str = "fp32", tokens: int = 1024, reps: int = 3
) -> LocalCompute:
    """Median prefill speed of `tokens` fresh tokens (no prefix cache) over `reps` runs."""

    engine = LLMEngine.from_dir(model_dir or ensure_default_model(), EngineConfig(prefix_cache=False, dtype=dtype))
    config = engine.model_config
    one_token = SamplingParams(max_tokens=1, ignore_eos=True)
    rng = random.Random(0)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(5, config.vocab_size) for _ in range(n)]

    engine.generate(prompt(64), one_token)  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        engine.generate(prompt(tokens), one_token)
        times.append(time.perf_counter() - start)
    kv_bytes = config.num_hidden_layers * 2 * config.num_key_value_heads * config.head_dim * engine.dtype.itemsize
    return LocalCompute(kv_bytes_per_token=kv_bytes, prefill_tokens_per_s=tokens / statistics.median(times))
