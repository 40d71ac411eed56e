"""The storage figures of master + diff storage: a real round of the trained default model stored
in real KV stores, every diff read back bit for bit."""

from __future__ import annotations

import pytest

from agentserve.bench.papers.tokendance.storage import TARGET, measure_storage

pytestmark = pytest.mark.unit

SMALL = {"agents": 3, "segments": 2, "segment_tokens": 32, "chunk_tokens": 16}


def test_with_nothing_recomputed_a_sibling_stores_no_rows_only_its_headers():
    figures = measure_storage(recompute_fraction=0.0, **SMALL)
    assert figures.recomputed_share == 0.0
    assert figures.diff_bytes == figures.diff_header_bytes  # 2 segments x 2 chunks x 2 followers, no payload
    assert figures.restored_exact
    assert figures.dense_row_bound == 3.0  # the masters alone: one copy for three agents
    assert figures.storage_reduction == figures.full_copy_bytes / (figures.master_bytes + figures.diff_header_bytes)


def test_recomputed_rows_cost_bytes_and_the_coded_diffs_beat_the_raw_rows():
    figures = measure_storage(recompute_fraction=0.25, **SMALL)
    assert figures.recomputed_share == 0.25  # ceil(0.25 * 32) = 8 of each segment's 32 tokens
    assert figures.restored_exact
    assert figures.diff_header_bytes < figures.diff_bytes < figures.diff_bytes_rows
    assert figures.storage_reduction == figures.full_copy_bytes / (figures.master_bytes + figures.diff_bytes)
    assert figures.storage_reduction_rows == figures.full_copy_bytes / (figures.master_bytes + figures.diff_bytes_rows)
    assert figures.storage_reduction > figures.storage_reduction_rows
    assert figures.dense_row_bound == 3 / (1 + 2 * 0.25 * 3 / 4)  # rows stored in 3 of the 4 layers
    assert figures.bytes_per_agent_full == figures.full_copy_bytes / 3
    # Three agents can never reach 11x: the master alone is a third of the full copies.
    assert TARGET > 3 and figures.fraction_for_target is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"agents": 1}, "agents must be at least 2"),
        ({"segments": 0}, "segments must be positive, got 0"),
        ({"recompute_fraction": 1.0}, r"recompute_fraction must be in \[0, 1\), got 1.0"),
        ({"segment_tokens": 100000}, "too short for 2 x 100000"),
    ],
)
def test_bad_parameters_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_storage(**{**SMALL, **kwargs})
