"""`agentserve model init`: trained weights by default, random ones on request."""

from __future__ import annotations

import pytest

from agentserve.cli.main import main
from agentserve.engine.model_init import init_model

pytestmark = pytest.mark.unit


def weights(folder) -> bytes:
    return (folder / "model.safetensors").read_bytes()


def test_init_writes_the_trained_model_by_default(tmp_path, capsys) -> None:
    assert main(["model", "init", "--out", str(tmp_path / "m")]) == 0
    assert weights(tmp_path / "m") == weights(init_model(tmp_path / "ref"))
    assert "wrote tiny llama model with trained weights to" in capsys.readouterr().err


def test_random_weights_come_from_the_seed(tmp_path, tiny_model_dir, capsys) -> None:
    assert main(["model", "init", "--out", str(tmp_path / "r0"), "--random-weights"]) == 0
    assert weights(tmp_path / "r0") == weights(tiny_model_dir)
    assert main(["model", "init", "--out", str(tmp_path / "r3"), "--random-weights", "--seed", "3"]) == 0
    assert "with random weights (seed 3)" in capsys.readouterr().err
    assert weights(tmp_path / "r3") == weights(init_model(tmp_path / "ref", seed=3))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", "3"], "--seed applies to --random-weights only"),
        (["--preset", "small"], "trained weights ship for the llama tiny and mixtral tiny presets only"),
    ],
)
def test_bad_combinations_are_named(args: list[str], message: str, tmp_path, capsys) -> None:
    assert main(["model", "init", "--out", str(tmp_path / "m"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
