"""`agentserve bench engine`: prefill and decode speed of one engine, and what a prefix hit saves.

Every ratio is measured side by side in one process, since the machines are shared and noisy.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch

from agentserve.bench.micro.prefill_flops import attention_flops, linear_flops_per_row, prefill_flops
from agentserve.bench.micro.prefill_kernels import PrefillKernels, synced_clock
from agentserve.contracts import SamplingParams
from agentserve.engine.config import ModelConfig
from agentserve.engine.device import device_name
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model import CausalLM
from agentserve.engine.sequence import Sequence

ONE_TOKEN = SamplingParams(max_tokens=1, ignore_eos=True)


def _tokens(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(5, vocab) for _ in range(n)]


def _timed(fn: Callable[..., object], clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds `fn` takes. An engine step needs no synced clock: its logits come back to the host."""
    start = clock()
    fn()
    return clock() - start


def prefill_tokens_per_s(engine: LLMEngine, rng: random.Random, contexts: Iterable[int], reps: int) -> dict[str, float]:
    vocab = engine.model_config.vocab_size
    out = {}
    for n in contexts:
        times = [_timed(lambda n=n: engine.generate(_tokens(rng, n, vocab), ONE_TOKEN)) for _ in range(reps)]
        out[str(n)] = round(n / statistics.median(times), 1)
    return out


def decode_step_ms(
    engine: LLMEngine, rng: random.Random, batches: Iterable[int], prompt_len: int, steps: int
) -> dict[str, float]:
    vocab = engine.model_config.vocab_size
    out = {}
    for batch in batches:
        params = SamplingParams(max_tokens=steps + 2, ignore_eos=True)
        seqs = [engine.add_request(_tokens(rng, prompt_len, vocab), params) for _ in range(batch)]
        while any(len(s.output_token_ids) == 0 for s in seqs):  # admit (prefill) everyone first
            engine.step()
        times = [_timed(engine.step) for _ in range(steps)]
        for s in seqs:
            engine.abort(s)
        out[str(batch)] = round(1000 * statistics.median(times), 3)
    return out


def cached_prefill_speedup(
    model_dir_engine: LLMEngine, rng: random.Random, reps: int, total: int = 1000, cached: int = 960
) -> dict:
    """Prefill of `total` tokens from scratch ÷ with the first `cached` tokens already in cache, and
    the same two prefills' kernels alone (`PrefillKernels`), all four interleaved."""
    vocab = model_dir_engine.model_config.vocab_size
    model, fingerprint, dtype = model_dir_engine.model, model_dir_engine.fingerprint, model_dir_engine.config.dtype
    if not isinstance(model, CausalLM):
        raise TypeError("the cached-prefill speedup needs an engine that computes (not an emulated one)")
    device = model_dir_engine.config.device  # the engines share the model: it stays where it is
    cold_engine = LLMEngine(model, fingerprint, EngineConfig(prefix_cache=False, dtype=dtype, device=device))
    warm_engine = LLMEngine(model, fingerprint, EngineConfig(dtype=dtype, device=device))
    cold_kernels, warm_kernels = (
        PrefillKernels(model, total, 0, warm_engine.config.batch_invariant),
        PrefillKernels(model, total - cached, cached, warm_engine.config.batch_invariant),
    )
    prefix = _tokens(rng, cached, vocab)
    warm_engine.generate(prefix + _tokens(rng, total - cached, vocab), ONE_TOKEN)
    cold_kernels.run()
    warm_kernels.run()
    cold, warm, cold_k, warm_k = [], [], [], []
    for _ in range(reps):
        cold.append(_timed(lambda: cold_engine.generate(_tokens(rng, total, vocab), ONE_TOKEN)))
        seq_box: list[Sequence] = []
        warm.append(
            _timed(
                lambda seq_box=seq_box: seq_box.append(
                    warm_engine.generate(prefix + _tokens(rng, total - cached, vocab), ONE_TOKEN)
                )
            )
        )
        if seq_box[0].num_cached_tokens != cached:
            raise RuntimeError(f"expected {cached} cached tokens, got {seq_box[0].num_cached_tokens}")
        cold_k.append(cold_kernels.run())
        warm_k.append(warm_kernels.run())
    cold_s, warm_s = statistics.median(cold), statistics.median(warm)
    cold_k_s, warm_k_s = (statistics.median(sum(run.values()) for run in runs) for runs in (cold_k, warm_k))
    cfg = model_dir_engine.model_config
    cold_flops, warm_flops = prefill_flops(cfg, total), prefill_flops(cfg, total - cached, cached)
    return {
        "speedup": round(cold_s / warm_s, 2),
        "scratch_ms": round(cold_s * 1000, 2),
        "cached_ms": round(warm_s * 1000, 2),
        # The speedup if both sides ran at the same FLOP rate; the achieved rates say how far the
        # cached side's small matrices fall short of the cold side's large ones.
        "flop_ratio": round(cold_flops / warm_flops, 2),
        "scratch_gflops": round(cold_flops / cold_s / 1e9, 1),
        "cached_gflops": round(warm_flops / warm_s / 1e9, 1),
        "scratch_kernels_ms": round(cold_k_s * 1000, 2),
        "cached_kernels_ms": round(warm_k_s * 1000, 2),
        # What the speedup would be if neither side did anything but its kernels, and the most the
        # cached side could reach against the scratch prefill as it runs (its overhead cut to zero).
        "kernels_speedup": round(cold_k_s / warm_k_s, 2),
        "speedup_bound": round(cold_s / warm_k_s, 2),
        # Each kernel class's rate inside those runs, at each side's row count (40 vs 1000).
        "kernel_gflops": {
            kind: {
                str(total - cached): _kernel_gflops(cfg, kind, total - cached, cached, warm_k),
                str(total): _kernel_gflops(cfg, kind, total, 0, cold_k),
            }
            for kind in ("linear", "attention")
        },
    }


def _kernel_gflops(cfg: ModelConfig, kind: str, new: int, cached: int, runs: list[dict[str, float]]) -> float:
    flops = new * linear_flops_per_row(cfg) if kind == "linear" else attention_flops(cfg, new, cached)
    return round(flops / statistics.median(run[kind] for run in runs) / 1e9, 1)


def linear_gflops(engine: LLMEngine, rows: tuple[int, ...], reps: int = 20) -> dict[str, float]:
    """The engine device's rate on the model's own MLP projection (hidden -> intermediate) at each
    row count: the physical limit behind the cached-prefill speedup, measured beside it."""
    cfg, device = engine.model_config, engine.config.torch_device
    clock = synced_clock(device)
    weight = torch.randn(cfg.intermediate_size, cfg.hidden_size, dtype=engine.dtype, device=device)
    out = {}
    for n in rows:
        x = torch.randn(n, cfg.hidden_size, dtype=engine.dtype, device=device)
        torch.nn.functional.linear(x, weight)
        best = min(_timed(lambda x=x: torch.nn.functional.linear(x, weight), clock) for _ in range(reps))
        out[str(n)] = round(2 * n * cfg.hidden_size * cfg.intermediate_size / best / 1e9, 1)
    return out


def run(model_dir: Path, dtype: str = "fp32", quick: bool = False, device: str = "cpu") -> dict:
    """`device`: the engines' (`EngineConfig.device`): auto, cpu, cuda or cuda:N."""
    rng = random.Random(0)
    config = EngineConfig(prefix_cache=False, dtype=dtype, kv_cache_bytes=512 << 20, device=device)
    engine = LLMEngine.from_dir(model_dir, config)
    engine.generate(_tokens(rng, 64, engine.model_config.vocab_size), ONE_TOKEN)  # warm-up
    reps = 1 if quick else 3
    # Prompts that leave room for the one generated token in the model's context (SmolLM2: 8192).
    room = engine.model_config.max_position_embeddings - 1
    contexts = tuple(n for n in ((512, 2048) if quick else (512, 2048, 8192)) if n <= room)
    speed = cached_prefill_speedup(engine, rng, reps=3 if quick else 7)
    return {
        "model": str(model_dir),
        "fingerprint": engine.fingerprint,
        "dtype": dtype,
        "device": device_name(config.torch_device),
        "block_size": engine.block_size,
        "prefill_tokens_per_s": prefill_tokens_per_s(engine, rng, contexts, reps),
        "decode_step_ms": decode_step_ms(engine, rng, (1, 8, 32), prompt_len=128, steps=4 if quick else 10),
        "kv_bytes_per_token": engine.model_config.kv_bytes_per_token(engine.dtype),
        "cached_prefill_speedup": speed["speedup"],
        "cached_prefill_detail_ms": {"scratch_1000": speed["scratch_ms"], "cached_960_of_1000": speed["cached_ms"]},
        "cached_prefill_flop_ratio": speed["flop_ratio"],
        "cached_prefill_gflops": {
            "scratch_1000": speed["scratch_gflops"],
            "cached_960_of_1000": speed["cached_gflops"],
        },
        "linear_gflops_by_rows": linear_gflops(engine, (40, 1000)),
        # The same two prefills' matmul and attention kernels alone (`PrefillKernels`), and the
        # speedup they allow: `cached_prefill_speedup_bound` is the most the cached prefill could
        # reach with every non-kernel cost (norms, rotary, KV writes, Python) cut to zero.
        "cached_prefill_kernels_ms": {
            "scratch_1000": speed["scratch_kernels_ms"],
            "cached_960_of_1000": speed["cached_kernels_ms"],
        },
        "cached_prefill_kernels_speedup": speed["kernels_speedup"],
        "cached_prefill_kernel_gflops_by_rows": speed["kernel_gflops"],
        "cached_prefill_speedup_bound": speed["speedup_bound"],
    }
