"""Emulated compute: forwards take the cost model's time (checked on a fake clock), tokens are a fixed
function of position and never EOS, the pool is the target GPU's size, and blocks are real
block-format buffers of the stand-in geometry that another emulated engine imports."""

from __future__ import annotations

import pytest

from agentserve.common.config import load_config
from agentserve.contracts import SamplingParams
from agentserve.costmodel.expert_parallel import DEEPSEEK_V3_MOE, ExpertParallelDecode, moe_free_decode_s
from agentserve.costmodel.gpus import H800
from agentserve.costmodel.kv_capacity import kv_capacity_blocks
from agentserve.costmodel.models import DEEPSEEK_V32
from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.emulated_pool import StandinGeometry
from agentserve.engine.emulated_runner import EmulatedRunner
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import ExternalPrefix
from agentserve.engine.sequence import Sequence
from agentserve.engine_service.kv_charge import KVCharge
from agentserve.engine_service.kv_moves import block_wire_bytes
from agentserve.kv.block_format import deserialize_blocks
from agentserve.kv.block_header import FingerprintMismatchError
from agentserve.prefill.config import PrefillConfig

pytestmark = pytest.mark.unit

D = 4.0
EMULATION = EmulationConfig(time_dilation=D)
CONFIG = EngineConfig(compute="emulated", emulation=EMULATION)


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def engine(tiny_model_dir) -> LLMEngine:
    return LLMEngine.emulated(tiny_model_dir, CONFIG)


def fake_runner(engine: LLMEngine) -> tuple[EmulatedRunner, FakeTime]:
    assert isinstance(engine.model, EmulatedModel)
    fake = FakeTime()
    runner = EmulatedRunner(engine.model, engine.model.pool(), sleep=fake.sleep, clock=fake.clock)
    return runner, fake


def test_the_engine_is_the_targets_shape_without_weights(engine, tiny_model_dir):
    model = engine.model
    assert isinstance(model, EmulatedModel)  # no CausalLM: no weights were read
    cost = EMULATION.cost()
    assert engine.pool.num_slots == kv_capacity_blocks(cost, 16) == 73_256
    assert (engine.model_config.num_hidden_layers, engine.model_config.max_position_embeddings) == (61, 163_840)
    assert (engine.model_config.vocab_size, engine.model_config.eos_token_id) == (8192, (1, 4))  # the tokenizer's

    # The fingerprint names what a block means (target, geometry, token ids), not how fast it is made.
    def fingerprint(**emulation) -> str:
        return LLMEngine.emulated(
            tiny_model_dir, EngineConfig(compute="emulated", emulation=EmulationConfig(**emulation))
        ).fingerprint

    assert engine.fingerprint.startswith("emu-")
    assert engine.fingerprint == fingerprint(time_dilation=1.0, prefill_mfu=0.2)
    assert len({engine.fingerprint, fingerprint(target_model="qwen2.5-32b"), fingerprint(kv_materialise_bytes=0)}) == 3


def test_prefill_and_decode_sleep_the_cost_models_time_dilated(engine):
    runner, fake = fake_runner(engine)
    seq = Sequence(list(range(5, 5 + 1000)), 1000, SamplingParams())
    runner.prefill(seq, num_cached=640)
    cost = EMULATION.cost()
    assert fake.sleeps == [cost.prefill_s(640, 360) * D]
    seqs = [Sequence(list(range(5, 5 + n)), n, SamplingParams()) for n in (100, 5000)]
    runner.decode(seqs)
    assert fake.sleeps[1] == pytest.approx(cost.decode_step_s([100, 5000]) * D)
    assert runner.busy_s == sum(fake.sleeps)


def test_a_decode_cost_sets_each_decode_step_s_time_in_turn(engine):
    assert isinstance(engine.model, EmulatedModel)
    fake = FakeTime()
    moe = ExpertParallelDecode(DEEPSEEK_V32, H800, DEEPSEEK_V3_MOE, [0.01, 0.03])
    runner = EmulatedRunner(engine.model, engine.model.pool(), fake.sleep, fake.clock, decode_cost=moe)
    contexts = [100, 5000]
    for _ in range(3):  # new sequences each step: no overlap with the step before
        runner.decode([Sequence(list(range(5, 5 + n)), n, SamplingParams()) for n in contexts])
    moe.restart()
    runner.decode([Sequence(list(range(5, 5 + n)), n, SamplingParams()) for n in contexts])
    moe_free = moe_free_decode_s(DEEPSEEK_V32, H800, DEEPSEEK_V3_MOE, contexts)
    assert fake.sleeps == pytest.approx([(moe_free + s) * D for s in (0.01, 0.03, 0.01, 0.01)])


def test_layerwise_prefill_loads_each_layer_before_its_share_and_waits_only_for_late_layers(engine):
    runner, fake = fake_runner(engine)
    per_layer = EMULATION.cost().prefill_s(32 * 16, 100) * D / 61
    calls: list[tuple[int, float]] = []

    def load_layer(layer: int):
        calls.append((layer, fake.now))
        if layer == 30:
            fake.now += 10 * per_layer  # layer 30's KV arrives late: compute stalls for it
        return None

    seq = Sequence(list(range(5, 5 + 32 * 16 + 100)), 32 * 16 + 100, SamplingParams())
    runner.prefill(seq, 32 * 16, ExternalPrefix(32, load_layer), external_start=0)
    assert [layer for layer, _ in calls] == list(range(61))
    assert [at for _, at in calls][:31] == pytest.approx([i * per_layer for i in range(31)])
    assert fake.now == pytest.approx(71 * per_layer)  # 61 layers of compute + the 10-layer stall
    assert runner.busy_s == pytest.approx(61 * per_layer)
    assert runner.layer_wait_s == pytest.approx(10 * per_layer)  # the stall, and only it


def test_tokens_are_a_function_of_position_and_never_eos(engine):
    seqs = engine.generate_many([[5, 6, 7], [9] * 40], SamplingParams(max_tokens=50))
    runner = engine.runner
    assert isinstance(runner, EmulatedRunner)
    for seq in seqs:
        assert seq.finish_reason == "length"
        assert seq.output_token_ids == [runner.token_at(p) for p in range(seq.num_prompt_tokens, len(seq))]
    assert not {runner.token_at(p) for p in range(20_000)} & {1, 4}
    seeded = engine.generate([5, 6, 7], SamplingParams(max_tokens=50, temperature=1.0, seed=3))
    assert seeded.output_token_ids == seqs[0].output_token_ids


def test_blocks_travel_between_emulated_engines_in_the_block_format(engine, tiny_model_dir):
    prompt = list(range(5, 5 + 100))
    seq = engine.generate(prompt, SamplingParams(max_tokens=1))
    ids = seq.block_ids[:6]
    data = engine.export_blocks(ids)
    blocks = deserialize_blocks(data)
    assert (blocks.header.num_layers, blocks.header.num_blocks, blocks.header.head_dim) == (61, 6, 2)
    assert len(engine.export_blocks(ids[:1])) == block_wire_bytes(engine) == 11_008
    other = LLMEngine.emulated(tiny_model_dir, CONFIG)
    assert other.import_blocks(data) == 6
    again = other.generate(prompt, SamplingParams(max_tokens=1))
    assert again.num_cached_tokens == 96
    real = LLMEngine.from_dir(tiny_model_dir)
    with pytest.raises(FingerprintMismatchError):
        real.import_blocks(data)
    # The NICs are charged a block's target bytes, 61 * 788 * 16, whatever its wire size.
    assert KVCharge.for_engine(engine, block_wire_bytes(engine)).per_block == 769_088


def test_full_materialisation_gives_the_targets_bytes(tiny_model_dir):
    full = StandinGeometry.for_target(DEEPSEEK_V32, 16, materialise_bytes=0)
    assert (full.head_dim, full.declared_block_bytes) == (197, 769_088)  # 788 B = K+V of 197 fp16
    capped = StandinGeometry.for_target(DEEPSEEK_V32, 16, materialise_bytes=64 << 10)
    assert capped.head_dim == (64 << 10) // (61 * 16 * 4) == 16
    engine = LLMEngine.emulated(
        tiny_model_dir, EngineConfig(compute="emulated", emulation=EmulationConfig(kv_materialise_bytes=0))
    )
    wire = block_wire_bytes(engine)
    assert 769_088 < wire < 769_088 * 1.01  # header and 64-byte alignment: under 1%


def test_bad_emulation_settings_name_the_setting():
    with pytest.raises(ValueError, match="compute must be one of real, emulated, got 'fake'"):
        EngineConfig(compute="fake")
    with pytest.raises(ValueError, match="compute must be one of real, emulated, got 'fake'"):
        PrefillConfig(compute="fake")
    with pytest.raises(ValueError, match="unknown target model 'gpt'; choose one of deepseek-v3.2"):
        _prefill("--compute", "emulated", "--target-model", "gpt")
    with pytest.raises(ValueError, match="unknown target GPU 'tpu'"):
        _prefill("--compute", "emulated", "--target-gpu", "tpu")
    with pytest.raises(ValueError, match="time_dilation must be positive"):
        _prefill("--compute", "emulated", "--time-dilation", "0")
    with pytest.raises(ValueError, match="kv_materialise_bytes must be >= 0"):
        _prefill("--compute", "emulated", "--kv-materialise-bytes", "-1")
    with pytest.raises(ValueError, match="prefill_mfu must be in"):
        _prefill("--compute", "emulated", "--prefill-mfu", "2")
    with pytest.raises(ValueError, match="time_dilation must be positive"):
        _prefill("--time-dilation", "0")  # checked whatever the compute mode
    assert _prefill("--compute", "emulated", "--time-dilation", "20").emulation.time_dilation == 20


def _prefill(*flags: str) -> PrefillConfig:
    """A prefill engine's config from its flags, as the process reads them."""
    return load_config(PrefillConfig, list(flags), env={})


def test_staged_prefill_takes_the_same_time_layer_by_layer(engine):
    runner, fake = fake_runner(engine)
    seq = Sequence(list(range(5, 5 + 40 * 16 + 7)), 40 * 16 + 7, SamplingParams(max_tokens=1))
    loaded: list[int] = []
    runner.prefill_staged(seq, [], [0], ExternalPrefix(40, lambda layer: loaded.append(layer)))
    assert loaded == list(range(61))
    assert fake.now == pytest.approx(EMULATION.cost().prefill_s(40 * 16, 7) * D)


@pytest.mark.parametrize("staged", [True, False])
def test_a_prefill_over_a_tail_costs_only_the_tokens_after_it(engine, staged):
    # 40 full blocks and a tail of 9 tokens cached: 7 + 16 - 9 = 14 tokens to compute.
    runner, fake = fake_runner(engine)
    seq = Sequence(list(range(5, 5 + 41 * 16 + 7)), 41 * 16 + 7, SamplingParams(max_tokens=1))
    loaded: list[int] = []
    external = ExternalPrefix(41, lambda layer: loaded.append(layer), tail_tokens=9)
    if staged:
        runner.prefill_staged(seq, [], [0, 1], external)
    else:
        runner.prefill(seq, external.num_tokens(16), external)
    assert loaded == list(range(61))
    assert fake.now == pytest.approx(EMULATION.cost().prefill_s(40 * 16 + 9, 14) * D)


def test_kv_commands_run_during_an_emulated_forward_not_after_it(tiny_model_dir):
    import asyncio
    import time

    from agentserve.engine.async_engine import AsyncEngine

    slow = EngineConfig(compute="emulated", emulation=EmulationConfig(time_dilation=100.0))
    engine = AsyncEngine(LLMEngine.emulated(tiny_model_dir, slow))
    step_s = EMULATION.cost().decode_step_s([10]) * 100  # ~0.9 s a decode step

    async def scenario() -> tuple[float, list[int]]:
        tokens: list[int] = []

        async def generate() -> None:
            async for event in engine.generate([5, 6, 7, 8, 9, 10, 11, 12, 13], SamplingParams(max_tokens=3)):
                tokens.append(event.token_id)

        task = asyncio.create_task(generate())
        while not tokens:  # the prefill is done: decode steps follow
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        start = time.monotonic()
        assert await engine.call(lambda e: e.blocks.num_free_slots) > 0
        waited = time.monotonic() - start
        await task
        return waited, tokens

    engine.start()
    try:
        waited, tokens = asyncio.run(scenario())
    finally:
        engine.stop()
    assert step_s > 0.8 and waited < 0.2  # served mid-step, not at its end
    runner = engine.engine.runner
    assert isinstance(runner, EmulatedRunner)
    assert tokens == [runner.token_at(p) for p in range(9, 12)]


def test_kv_blocks_sets_the_pool_within_what_the_target_holds(tiny_model_dir):
    capacity = kv_capacity_blocks(EMULATION.cost(), 16)
    small = LLMEngine.emulated(
        tiny_model_dir, EngineConfig(compute="emulated", emulation=EmulationConfig(kv_blocks=48))
    )
    assert small.pool.num_slots == small.blocks.num_slots == 48
    assert EmulationConfig(kv_blocks=0).pool_blocks(16) == capacity
    assert _prefill("--compute", "emulated", "--kv-blocks", str(capacity)).emulation.kv_blocks == capacity
    with pytest.raises(ValueError, match=f"kv_blocks {capacity + 1} is more than h800 holds for deepseek-v3.2 "):
        _prefill("--compute", "emulated", "--block-size", "16", "--kv-blocks", str(capacity + 1))
    with pytest.raises(ValueError, match="kv_blocks must be >= 0"):
        _prefill("--compute", "emulated", "--kv-blocks", "-1")
    assert _prefill("--kv-blocks", str(10**9)).emulation.kv_blocks == 10**9  # bounded by the target when emulated


def test_decode_steps_overlap_the_hosts_work_as_an_overlap_scheduler_does(engine):
    runner, fake = fake_runner(engine)
    seqs = [Sequence(list(range(5, 5 + n)), n, SamplingParams()) for n in (100, 5000)]
    step = EMULATION.cost().decode_step_s([100, 5000]) * D
    runner.decode(seqs)
    assert fake.now == pytest.approx(step)
    # Host work shorter than a step (scheduling, sampling, streaming) ran while the GPU ran the last
    # step: the next step still ends one modelled step after the last one.
    fake.now += 0.3 * step
    runner.decode(seqs)
    assert fake.now == pytest.approx(2 * step)
    # Host work longer than a step shows only by what it outlasts the step: a gap of 1.5 steps.
    fake.now += 1.5 * step
    runner.decode(seqs)
    assert fake.now == pytest.approx(3.5 * step)
    # A new batch after idle is not overlapped with anything: a whole step from now.
    fake.now += 10 * step
    others = [Sequence(list(range(5, 5 + n)), n, SamplingParams()) for n in (100, 5000)]
    runner.decode(others)
    assert fake.now == pytest.approx(14.5 * step)
    # A prefill between steps kept the GPU busy: the next step starts after it, not overlapped.
    fake.now += 0.3 * step
    prefill_end = fake.now + EMULATION.cost().prefill_s(0, 100) * D
    runner.prefill(Sequence(list(range(5, 105)), 100, SamplingParams()), num_cached=0)
    assert fake.now == pytest.approx(prefill_end)
    runner.decode(others)
    assert fake.now == pytest.approx(prefill_end + step)
    assert runner.busy_s == pytest.approx(5 * step + prefill_end - 14.8 * step)
