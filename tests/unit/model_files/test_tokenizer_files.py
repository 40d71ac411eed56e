"""The scheduler's tokenizer-only folder is byte for byte the default model's tokenizer files."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentserve.model_files.tokenizer_files import build_once, ensure_default_tokenizer

pytestmark = pytest.mark.unit

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def test_default_tokenizer_matches_the_default_models(tiny_model_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTSERVE_HOME", str(tmp_path))
    folder = ensure_default_tokenizer()
    assert sorted(p.name for p in folder.iterdir()) == sorted(TOKENIZER_FILES)  # no weights, no config.json
    for name in TOKENIZER_FILES:
        assert (folder / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    assert ensure_default_tokenizer() == folder  # reused, not rebuilt


def test_build_once_builds_once_and_leaves_nothing_behind_a_failed_build(tmp_path: Path) -> None:
    calls: list[Path] = []

    def build(staging: Path) -> None:
        calls.append(staging)
        (staging / "done").write_text("x")

    target = tmp_path / "thing"
    assert build_once(target, "done", build) == target and build_once(target, "done", build) == target
    assert len(calls) == 1 and (target / "done").read_text() == "x"

    def failing(staging: Path) -> None:
        (staging / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        build_once(tmp_path / "other", "done", failing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thing"]
