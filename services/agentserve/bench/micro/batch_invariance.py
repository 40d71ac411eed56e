"""What batch-invariant numerics cost: decode steps and prefills of the default model with
`EngineConfig.batch_invariant` off and on, interleaved in one process so a shared machine's load
falls on both alike. The fastest of a few steps is kept (the noise on a shared box is one-sided).

    python -m agentserve.bench.micro.batch_invariance [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

from agentserve.contracts import SamplingParams
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

DECODE_CASES = ((1, 128), (8, 128), (32, 128), (8, 1000))  # (sequences, prompt tokens)
PREFILL_CASES = (40, 512, 2048)
STEPS = 6


def _tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(5, 8192) for _ in range(n)]


def _decode_step_s(engine: LLMEngine, rng: random.Random, batch: int, prompt: int) -> float:
    params = SamplingParams(max_tokens=STEPS + 6, ignore_eos=True)
    seqs = [engine.add_request(_tokens(rng, prompt), params) for _ in range(batch)]
    while any(not s.output_token_ids for s in seqs):  # prefills done: every later step is decode
        engine.step()
    times = []
    for _ in range(STEPS):
        start = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - start)
    for s in seqs:
        engine.abort(s)
    return min(times)


def _prefill_s(engine: LLMEngine, rng: random.Random, prompt: int) -> float:
    start = time.perf_counter()
    engine.generate(_tokens(rng, prompt), SamplingParams(max_tokens=1, ignore_eos=True))
    return time.perf_counter() - start


def run(rounds: int = 2) -> dict[str, dict[str, float]]:
    """Per case: off and on (fastest over `rounds`, in ms) and on / off."""
    base = LLMEngine.from_dir(ensure_default_model(), EngineConfig(prefix_cache=False, kv_cache_bytes=64 << 20))
    engines = {
        flag: LLMEngine(
            base.model,
            base.fingerprint,
            EngineConfig(prefix_cache=False, kv_cache_bytes=256 << 20, batch_invariant=flag),
        )
        for flag in (False, True)
    }
    rng = random.Random(0)
    best: dict[str, dict[bool, float]] = {}
    for _ in range(rounds):
        for batch, prompt in DECODE_CASES:
            for flag, engine in engines.items():
                seconds = _decode_step_s(engine, rng, batch, prompt)
                case = best.setdefault(f"decode_b{batch}_ctx{prompt}", {})
                case[flag] = min(case.get(flag, seconds), seconds)
        for prompt in PREFILL_CASES:
            for flag, engine in engines.items():
                seconds = _prefill_s(engine, rng, prompt)
                case = best.setdefault(f"prefill_{prompt}", {})
                case[flag] = min(case.get(flag, seconds), seconds)
    return {
        name: {"off_ms": t[False] * 1e3, "on_ms": t[True] * 1e3, "on_over_off": t[True] / t[False]}
        for name, t in best.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the fastest counts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    figures = run(args.rounds)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, f in figures.items():
        print(f"{name:24s} off {f['off_ms']:8.2f} ms  on {f['on_ms']:8.2f} ms  on/off {f['on_over_off']:.2f}")


if __name__ == "__main__":
    main()
