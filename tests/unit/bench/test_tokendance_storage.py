"""The storage figures of master + diff storage, from real encoded blocks."""

from __future__ import annotations

import pytest

from agentserve.bench.tokendance_storage import measure_storage, storage_curve

pytestmark = pytest.mark.unit

SMALL = {"agents": 4, "segments": 1, "segment_tokens": 32}
ROW = 2 * 64 * 2  # the tiny preset: kv heads * head_dim * fp16 bytes, one token's K (or V) in one layer


def test_with_nothing_recomputed_a_sibling_costs_only_its_headers():
    figures = measure_storage(recompute_fraction=0.0, **SMALL)
    assert (figures.recomputed_per_sibling, figures.diff_bytes) == (0, figures.diff_header_bytes)
    assert figures.restored_exact
    assert figures.storage_reduction == figures.full_copy_bytes / (figures.master_bytes + figures.diff_header_bytes)
    assert figures.bytes_per_agent_full == figures.full_copy_bytes / 4


def test_each_recomputed_token_costs_its_k_and_v_rows_in_every_layer():
    figures = measure_storage(recompute_fraction=0.25, **SMALL)
    assert figures.recomputed_per_sibling == 8  # ceil(0.25 * 32): two anchors and six others
    layers, diffed_agents = 4, 3  # the first agent's copy is the master: it stores no diff
    assert figures.diff_bytes - figures.diff_header_bytes == diffed_agents * 8 * layers * 2 * ROW
    assert figures.restored_exact


def test_the_reduction_falls_as_the_fraction_grows():
    curve = storage_curve((0.0, 0.1, 0.5), **SMALL)
    assert [f.recompute_fraction for f in curve] == [0.0, 0.1, 0.5]
    assert curve[0].storage_reduction > curve[1].storage_reduction > curve[2].storage_reduction
    assert len({f.full_copy_bytes for f in curve}) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"segment_tokens": 20}, "segment_tokens must be a positive multiple of kv_block_tokens"),
        ({"agents": 0}, "agents must be positive"),
        ({"recompute_fraction": 1.5}, r"recompute_fraction must be in \[0, 1\]"),
    ],
)
def test_bad_parameters_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        measure_storage(**{**SMALL, **kwargs})
