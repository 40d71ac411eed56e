"""`agentserve bench spec`: speculative decoding on tool-echo turns, speculative beside plain.

One model, loaded once, serves three engines that differ only in `EngineConfig.speculative`:
`off` (the baseline), `ngram` (prompt lookup) and `draft` (the target's leading layers as a
self-speculative draft). Each round runs the same batch of tool-echo turns (`spec_workload`)
through each engine in turn, greedy; a round's prefills run before its clock starts, so the
figures are decode only. Every speed ratio is a median over rounds of speculative over plain
within one round (the machine is shared and noisy, so only side-by-side figures compare).
`greedy_identical` checks every speculative output against the plain one, token for token.

Why a ratio is what it is: `verify_forward_ms` times the decode forward of the same batch with
1 row per sequence (a plain step) and with 1 + k rows (a verify of k drafts, each sequence's
context read once for all its rows), so the speedup's ceiling, accepted tokens per step over the
verify's relative cost, is measured beside it; and, as the baseline, 1 + k rows that each read
their sequence's context (a draft position as a decode row of its own).
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch

from agentserve.bench.micro.spec_workload import tool_echo_turns
from agentserve.contracts import SamplingParams
from agentserve.engine.attention import DecodeMetadata
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.loader import load_model
from agentserve.engine.model import CausalLM
from agentserve.engine.runner import ModelRunner
from agentserve.engine.sequence import Sequence
from agentserve.engine.speculative.config import SpeculativeConfig
from agentserve.model_files.gguf_folder import model_folder
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import models_home

INSTRUCT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
METHODS = ("ngram", "draft")


def default_model() -> Path:
    """SmolLM2-135M-Instruct, the real instruct model the install step puts in the models cache:
    the tiny default model has no chat template and does not copy a tool output when asked."""
    return models_home() / INSTRUCT_GGUF


def _decode_round(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[list[Sequence], float]:
    """Run the batch to the end; the seconds spent after every prompt has its first token."""
    seqs = [engine.add_request(p, params) for p in prompts]
    while any(s.num_output_tokens == 0 for s in seqs):
        engine.step()
    start = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return seqs, time.perf_counter() - start


def _decoded(seqs: list[Sequence]) -> int:
    return sum(s.num_output_tokens - 1 for s in seqs)  # the first token came from the prefill


def _verify_context_per_row(engine: LLMEngine, seqs: list[Sequence], drafts: list[list[int]]) -> torch.Tensor:
    """The verify forward as it would run with every draft position a decode row of its own, each
    reading its sequence's whole context: the baseline the one-read-per-sequence verify replaces."""
    assert isinstance(engine.runner, ModelRunner) and isinstance(engine.runner.model, CausalLM)
    pool = engine.runner.pool
    tables, lengths, ids = [], [], []
    for seq, draft in zip(seqs, drafts):
        for j, token in enumerate([seq.token_ids[-1], *draft]):
            tables.append(seq.slots)
            lengths.append(len(seq) + j)
            ids.append(token)
    meta = DecodeMetadata.build(tables, pool.block_size, lengths, pool.dtype, engine.config.batch_invariant)
    positions = torch.as_tensor(lengths, dtype=torch.long) - 1
    return engine.runner.model(torch.as_tensor(ids, dtype=torch.long), positions, pool, meta)


def verify_forward_ms(engine: LLMEngine, prompts: list[list[int]], k: int, reps: int) -> dict[str, float]:
    """Median ms of the batch's decode forward with 1 row per sequence, with 1 + k rows (the
    engine's verify: one context read per sequence), and with 1 + k rows each reading the context
    (the per-row baseline); interleaved, so load drift hits all three alike."""
    runner = engine.runner
    assert isinstance(runner, ModelRunner)
    seqs = [engine.add_request(p, SamplingParams(max_tokens=k + 2, ignore_eos=True)) for p in prompts]
    while any(s.num_output_tokens == 0 for s in seqs):
        engine.step()
    for seq in seqs:  # room for k draft positions
        for j in range(1, k + 1):
            engine.blocks.append(seq.slots, len(seq) + j)
    drafts = [[seq.token_ids[-1]] * k for seq in seqs]
    runs = {
        "1_row": lambda: runner.decode(seqs),
        f"{1 + k}_rows": lambda: runner.verify(seqs, drafts),
        f"{1 + k}_rows_context_per_row": lambda: _verify_context_per_row(engine, seqs, drafts),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, forward in runs.items():
            start = time.perf_counter()
            forward()
            times[name].append(time.perf_counter() - start)
    for seq in seqs:
        engine.abort(seq)
    ms = {name: statistics.median(t) for name, t in times.items()}
    one, many, per_row = ms.values()
    return {name: round(1000 * t, 2) for name, t in ms.items()} | {
        "ratio": round(many / one, 3),
        "ratio_context_per_row": round(per_row / one, 3),
    }


def run(
    model: Path | None = None,
    batch: int = 4,
    max_tokens: int = 96,
    rounds: int = 3,
    k: int = 6,
    ngram: int = 2,
    draft_layers: int = 0,
) -> dict:
    model_path = model or default_model()
    folder = model_folder(model_path)
    target, fingerprint = load_model(folder, "fp32")
    if not isinstance(target, CausalLM):
        raise ValueError("bench spec needs a model that computes")
    prompts = tool_echo_turns(Tokenizer.from_dir(folder), batch)
    params = SamplingParams(max_tokens=max_tokens)
    configs = {"off": SpeculativeConfig()} | {
        m: SpeculativeConfig(m, k=k, ngram=ngram, draft_layers=draft_layers)  # type: ignore[arg-type]
        for m in METHODS
    }
    engines = {name: LLMEngine(target, fingerprint, EngineConfig(speculative=c)) for name, c in configs.items()}
    for engine in engines.values():  # warm-up, and the prompts' prefixes cached
        _decode_round(engine, prompts, SamplingParams(max_tokens=2))
    tps: dict[str, list[float]] = {name: [] for name in engines}
    ratios: dict[str, list[float]] = {m: [] for m in METHODS}
    identical = {m: True for m in METHODS}
    for _ in range(rounds):
        outputs = {}
        for name, engine in engines.items():
            seqs, seconds = _decode_round(engine, prompts, params)
            outputs[name] = [s.output_token_ids for s in seqs]
            tps[name].append(_decoded(seqs) / seconds)
        for m in METHODS:
            ratios[m].append(tps[m][-1] / tps["off"][-1])
            identical[m] = identical[m] and outputs[m] == outputs["off"]
    cost = verify_forward_ms(engines["off"], prompts, k, reps=5)
    result: dict = {
        "model": str(model_path),
        "regime": {
            "turns": "tool-echo (bench/micro/spec_workload.py): a JSON tool output, then asked back verbatim",
            "batch": batch,
            "prompt_tokens": [len(p) for p in prompts],
            "max_tokens": max_tokens,
            "rounds": rounds,
            "sampling": "greedy",
            "k": k,
            "ngram": ngram,
            "draft_layers": engines["draft"].speculator.drafter.layers,  # type: ignore[union-attr]
            "target_layers": target.config.num_hidden_layers,
            "torch_threads": torch.get_num_threads(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 1),
        },
        "plain_decode_tokens_per_s": round(statistics.median(tps["off"]), 2),
        "verify_forward_ms": cost,
    }
    for m in METHODS:
        stats = engines[m].speculator.stats  # type: ignore[union-attr]
        result[m] = {
            "accepted_tokens_per_step": round(stats.tokens_per_step, 3),
            "draft_acceptance_rate": round(stats.accepted / stats.drafted, 3) if stats.drafted else 0.0,
            "decode_tokens_per_s": round(statistics.median(tps[m]), 2),
            "decode_tokens_per_s_ratio": round(statistics.median(ratios[m]), 3),
            "ratio_per_round": [round(r, 3) for r in ratios[m]],
            "greedy_identical": identical[m],
            # The most this verify cost allows: tokens per step over the verify's cost ratio.
            "speedup_bound": round(stats.tokens_per_step / cost["ratio"], 3),
        }
    # The must-show keys at the top level, for prompt lookup (the drafter fit for tool-echo turns).
    for key in ("accepted_tokens_per_step", "decode_tokens_per_s_ratio", "greedy_identical"):
        result[key] = result["ngram"][key]
    return result
