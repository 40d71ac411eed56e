"""Device selection (`EngineConfig.device`, `--device`), checked on the CPU: what each value resolves
to, the refusals naming the flag, and a cpu engine placing everything on the CPU with the default's
greedy tokens. The CUDA path itself runs in scripts/gpu_check.sh."""

from __future__ import annotations

import pytest
import torch

from agentserve.cluster.settings import ComputeSettings
from agentserve.contracts import SamplingParams
from agentserve.engine.device import resolve_device
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.prefix_attention import attend_masked, attend_with_prefix
from agentserve.engine_service.config import EngineServiceConfig

pytestmark = pytest.mark.unit

GREEDY = SamplingParams(max_tokens=24, ignore_eos=True)


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_auto_resolves_to_cpu_without_cuda(no_cuda):
    assert resolve_device("auto") == torch.device("cpu")
    assert EngineConfig(device="auto").torch_device == torch.device("cpu")


def test_auto_picks_cuda_when_torch_sees_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_cuda_index_is_checked_against_the_gpus_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"--device.*'cuda:2'.*2 CUDA GPU"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("value", ["cuda", "cuda:0"])
def test_cuda_without_cuda_is_refused_naming_the_flag(no_cuda, value):
    with pytest.raises(ValueError, match=r"device \(--device\) '" + value + "' asks for CUDA"):
        EngineConfig(device=value)
    with pytest.raises(ValueError, match=r"--device"):
        EngineServiceConfig(device=value)


@pytest.mark.parametrize("value", ["cpu:0", "gpu", "CUDA", "cuda:", "cuda:x", "", "mps"])
def test_other_values_are_refused_naming_the_flag(value):
    with pytest.raises(ValueError, match=r"device \(--device\) must be auto, cpu, cuda or cuda:N, got " + repr(value)):
        EngineConfig(device=value)


def test_engine_service_passes_device_to_the_engine():
    assert EngineServiceConfig(device="cpu").engine_config().device == "cpu"
    assert EngineServiceConfig().engine_config().device == "cpu"  # the default, and CI's


def test_up_passes_device_to_every_real_engine(no_cuda):
    assert ComputeSettings().engine_args() == []  # cpu, the engines' default
    assert ComputeSettings(device="auto").engine_args() == ["--device", "auto"]
    with pytest.raises(ValueError, match=r"--device"):
        ComputeSettings(device="cuda")


def test_cpu_engine_places_weights_and_pool_on_cpu_with_the_defaults_tokens(tiny_model_dir):
    prompt = list(range(5, 105))
    default = LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=8 << 20))
    cpu = LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=8 << 20, device="cpu"))
    assert {p.device for p in cpu.model.parameters()} == {torch.device("cpu")}
    assert cpu.pool.k.device == cpu.pool.v.device == cpu.pool.device == torch.device("cpu")
    expected = default.generate(prompt, GREEDY).output_token_ids
    assert len(set(expected)) > 1  # not a degenerate repeat
    assert cpu.generate(prompt, GREEDY).output_token_ids == expected


def test_masked_prefix_attention_matches_the_merged_one():
    """The single masked SDPA call a GPU prefill takes equals the CPU's two-part merge."""
    gen = torch.Generator().manual_seed(0)
    cached, new, heads, kv_heads, d = 37, 11, 8, 2, 16
    q = torch.randn(new, heads, d, generator=gen)
    k, v = (torch.randn(new, kv_heads, d, generator=gen) for _ in range(2))
    prefix_k, prefix_v = (torch.randn(cached, kv_heads, d, generator=gen) for _ in range(2))
    merged = attend_with_prefix(q, k, v, prefix_k, prefix_v)
    masked = attend_masked(q, k, v, prefix_k, prefix_v)
    assert masked.shape == (new, heads, d)
    torch.testing.assert_close(masked, merged, atol=1e-5, rtol=1e-5)
