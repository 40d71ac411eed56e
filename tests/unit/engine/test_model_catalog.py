"""`--model` by name or path: SmolLM2 by default for serving, the tiny model by name, paths as they are."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentserve.cli.main import build_parser
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.model_catalog import (
    SMOLLM2_FILE,
    SMOLLM2_NAME,
    TINY_AGENT_NAME,
    TINY_NAME,
    ServedModel,
    describe,
    resolve_model,
    smollm2_file,
)
from agentserve.engine.model_init import trained_weights_path
from agentserve.engine_service.config import EngineServiceConfig
from agentserve.scheduler.config import SchedulerConfig

pytestmark = pytest.mark.unit


def test_no_model_named_serves_smollm2_from_the_install_steps_file() -> None:
    if not smollm2_file().is_file():
        pytest.fail(f"{smollm2_file()} is missing: scripts/install.sh fetches it")
    assert resolve_model(None) == ServedModel(SMOLLM2_NAME, smollm2_file())
    assert resolve_model("smollm2") == resolve_model(None)
    assert smollm2_file().name == SMOLLM2_FILE == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_up_names_no_model_unless_told_so_the_default_is_the_catalogs() -> None:
    assert build_parser().parse_args(["up", "--local"]).model is None
    assert build_parser().parse_args(["up", "--local", "--model", "tiny"]).model == "tiny"


def test_tiny_is_the_embedded_model_under_the_services_default_name() -> None:
    assert resolve_model("tiny") == ServedModel(TINY_NAME, ensure_default_model())
    # The name the services use when none is passed: what the tests' clusters serve.
    assert SchedulerConfig.model_name == EngineServiceConfig.model_name == TINY_NAME


def test_tiny_agent_is_the_tiny_architecture_with_the_agent_weights() -> None:
    model = resolve_model("tiny-agent")
    assert model == ServedModel(TINY_AGENT_NAME, ensure_default_model(agent=True))
    assert (model.source / "config.json").read_bytes() == (ensure_default_model() / "config.json").read_bytes()
    assert (model.source / "tokenizer.json").read_bytes() == (ensure_default_model() / "tokenizer.json").read_bytes()
    agent = load_file(model.source / "model.safetensors")
    shipped = load_file(trained_weights_path("tiny", agent=True))
    assert set(agent) == set(shipped) and all(torch.equal(agent[k], shipped[k].float()) for k in agent)
    assert not torch.equal(
        agent["model.norm.weight"], load_file(ensure_default_model() / "model.safetensors")["model.norm.weight"]
    )


def test_a_path_serves_under_its_own_name(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert resolve_model(str(folder)) == ServedModel("my-model", folder)
    gguf = tmp_path / "Other-1B.Q8_0.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(str(gguf)) == ServedModel("Other-1B.Q8_0", gguf)
    smollm2_copy = tmp_path / SMOLLM2_FILE
    smollm2_copy.write_bytes(b"GGUF")
    assert resolve_model(str(smollm2_copy)).name == SMOLLM2_NAME


def test_a_missing_model_is_an_error_naming_what_fetches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ValueError, match=r"--model 'nope' is neither a model of the catalog \(smollm2, tiny, tiny-agent\)"
    ):
        resolve_model("nope")
    monkeypatch.setenv("AGENTSERVE_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"Instruct.Q4_1.gguf does not exist; scripts/install.sh fetches it"):
        resolve_model(None)


def test_describe_names_the_model_its_file_layers_and_dtype() -> None:
    tiny = resolve_model("tiny")
    assert describe(tiny, "bf16") == (
        f"model agentserve-tiny from {tiny.source}: 4 layers, hidden 256, vocabulary 8192, served in bf16"
    )
    smollm2 = resolve_model("smollm2")
    assert describe(smollm2, "fp32") == (
        f"model SmolLM2-135M-Instruct from {smollm2_file()}: 30 layers, hidden 576, vocabulary 49152, served in fp32"
    )
