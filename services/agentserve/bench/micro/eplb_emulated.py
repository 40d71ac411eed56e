"""`bench eplb`'s emulated decode: TPOT measured on emulated decode engines, with and without EPLB.

Per case, two emulated-compute engines (`LLMEngine.emulated`: the engine's own scheduler and
continuous batching, forwards sleeping the target's time) each decode `decode_batch` sequences
of about `decode_context` tokens, one rank's batch of DeepSeek-V3.2's expert-parallel decode on
H800s. A decode step takes `ExpertParallelDecode`'s time: the non-MoE part for the live batch's
contexts, plus the MoE layers at their slowest rank's time under the replay's routing (the same
per-step routing the cost-model TPOT is computed from), placed by EPLB's plan in one engine and
statically in the other.

The sequences share their first `decode_context - SUFFIX` tokens, prefilled once and then cached,
so each engine's run is decode. Once every sequence is decoding, each step that decodes the full
batch is timed on the wall clock; a TPOT sample is the gap between consecutive such steps (the
gap each of the batch's sequences sees between its tokens), in local seconds over the time
dilation. The host's scheduling, sampling and Python overlap the step as an overlap scheduler
runs them (`EmulatedRunner`), and show in the gaps only where they outlast it: a loaded machine
shows as host delay, the same for both engines, which run one after the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from agentserve.bench.common.stats import distribution
from agentserve.contracts import SamplingParams
from agentserve.costmodel.expert_parallel import ExpertParallelDecode, MoeLayerShape
from agentserve.costmodel.gpus import H800
from agentserve.costmodel.models import DEEPSEEK_V32
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

SUFFIX = 16  # tokens of each sequence's own, after the shared prefix (one block)
BLOCK = 16
HEADROOM_STEPS = 8  # decode tokens beyond the timed steps, for sequences admitted late


def decode_tpot(
    vocabulary_dir: Path,
    shape: MoeLayerShape,
    moe_step_s: list[float],
    batch: int,
    context: int,
    time_dilation: float,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, float | int | None]:
    """TPOT in target milliseconds (`distribution`) of an emulated decode engine whose steps'
    MoE layers take `moe_step_s` in turn, one timed full-batch step per entry."""
    if context <= SUFFIX or context % BLOCK:
        raise ValueError(f"decode context must be a multiple of {BLOCK} above {SUFFIX}, got {context}")
    steps = len(moe_step_s)
    blocks = context // BLOCK + batch * (-(-(SUFFIX + steps + HEADROOM_STEPS) // BLOCK) + 1)
    config = EngineConfig(
        compute="emulated",
        max_batch_size=batch,
        emulation=EmulationConfig(time_dilation=time_dilation, kv_blocks=blocks),
    )
    cost = ExpertParallelDecode(DEEPSEEK_V32, H800, shape, moe_step_s)
    engine = LLMEngine.emulated(vocabulary_dir, config, decode_cost=cost)
    vocab = engine.model_config.vocab_size
    prefix = [5 + i * 7919 % (vocab - 5) for i in range(context - SUFFIX)]
    engine.generate(prefix + [5], SamplingParams(max_tokens=1))  # the shared prefix, cached from now on
    params = SamplingParams(max_tokens=steps + HEADROOM_STEPS, ignore_eos=True)
    seqs = [
        engine.add_request(prefix + [5 + (i * SUFFIX + j) % (vocab - 5) for j in range(SUFFIX)], params)
        for i in range(batch)
    ]
    while not all(s.output_token_ids for s in seqs):
        engine.step()
    cost.restart()
    ends = [clock()]
    while len(ends) <= steps:
        if len(engine.running) != batch:
            raise RuntimeError(f"the decode batch fell to {len(engine.running)} of {batch} sequences")
        engine.step()
        ends.append(clock())
    gaps_s = [(b - a) / time_dilation for a, b in zip(ends, ends[1:])]
    return distribution(gaps_s, scale=1e3)
