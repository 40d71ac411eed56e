"""Quality at the workloads' lengths (`quality_real.py`), on the tiny model at small lengths: every
(shape, length, fraction) cell, fraction 1 the full recompute, the fraction the floor chooses; and
the round prefill's three ways (`engine_round.py`) on a small round: the same chunk cache and
masters, the collective recompute together."""

from __future__ import annotations

import pytest
import torch

from agentserve.bench.papers.tokendance.engine_round import time_round
from agentserve.bench.papers.tokendance.quality_real import Cell, RealPromptSet, Shape, choose_fraction, run
from agentserve.bench.papers.tokendance.report import _real_quality_markdown
from agentserve.bench.papers.tokendance.workload import generative_agents
from agentserve.engine.loader import load_model

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model(tiny_model_dir)[0]


def test_every_cell_is_measured_and_fraction_one_is_the_full_recompute(model) -> None:
    prompt_set = RealPromptSet(lengths=(48, 64), agents=3, tail_tokens=4, shapes=(Shape("a", 2, 8), Shape("b", 4, 4)))
    stream = torch.randint(300, 8000, (2000,), generator=torch.Generator().manual_seed(3)).tolist()
    result = run(model, stream, prompt_set, (0.0, 1.0), log=lambda line: None)
    cells = {(c["shape"], c["prompt_tokens"], c["recompute_fraction"]): c for c in result["cells"]}
    assert len(cells) == 2 * 2 * 2 and result["lengths"] == [48, 64]
    for shape in ("a", "b"):
        for length in (48, 64):
            full = cells[(shape, length, 1.0)]
            assert (full["top1_agreement"], full["mean_kl"], full["recomputed_share"]) == (1.0, 0.0, 1.0)
            assert full["scored_positions"] == 2 * 4  # the followers' questions
    assert result["chosen_fraction"] in (0.0, 1.0)
    with pytest.raises(ValueError, match="has no room for a history"):
        RealPromptSet(lengths=(16,), tail_tokens=4, shapes=(Shape("a", 2, 8),))
    with pytest.raises(ValueError, match="needs more than the text's"):
        run(model, stream[:100], prompt_set, (1.0,), log=lambda line: None)


def test_the_chosen_fraction_is_the_smallest_meeting_the_floor_in_every_cell() -> None:
    def cell(length: int, fraction: float, top1: float) -> Cell:
        return Cell("a", length, fraction, top1, 0.0, fraction, 10)

    cells = [cell(1024, 0.1, 0.96), cell(2048, 0.1, 0.94), cell(1024, 0.2, 0.95), cell(2048, 0.2, 0.97)]
    assert choose_fraction(cells, (0.1, 0.2)) == 0.2
    assert choose_fraction(cells[:2], (0.1,)) is None


def test_the_round_prefill_times_the_chunk_cache_and_the_collective_recompute(model) -> None:
    timing = time_round(generative_agents(32, 5).scaled(64), 1, 0.07, model, repeats=1)
    assert timing.masters_per_request == timing.masters_collective == 32  # the chunk cache: each block once
    assert timing.kv_held_tokens_pic == timing.kv_held_tokens_collective + 32 * 2  # plus the chunk cache
    assert timing.prefill_speedup_vs_pic > 0 and timing.repeats == 1
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        time_round(generative_agents(32, 5).scaled(64), 1, 0.07, model, repeats=0)


def test_the_report_lists_the_real_models_cells() -> None:
    real = {
        "fractions": [0.1],
        "top1_floor": 0.95,
        "chosen_fraction": None,
        "cells": [
            {"shape": "a", "prompt_tokens": 1024, "recompute_fraction": 0.1, "top1_agreement": 0.9, "mean_kl": 0.01}
        ],
    }
    lines = _real_quality_markdown(real)
    assert "| a | 1024 | 0.9 / 0.01 |" in lines and any("Chosen fraction" in line for line in lines)
