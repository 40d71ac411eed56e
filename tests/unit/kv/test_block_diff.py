"""Diff blocks: a sibling stored as the rows that differ from its re-rotated master, restored exactly."""

from __future__ import annotations

import pytest
import torch

from agentserve.kv.block_diff import DiffRestorer, check_master, restore_block, serialize_diff
from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_header import CorruptBlockError, read_header
from agentserve.kv.rope_shift import RopeShift
from tests.support.diff_blocks import FP, HEAD_DIM, LAYERS, MASTER_POSITION, SHIFT, family

pytestmark = pytest.mark.unit


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_diff_holds_only_the_recomputed_rows_and_restores_bit_for_bit(dtype):
    fam = family(dtype=dtype)
    for sibling in fam.siblings:
        header = read_header(sibling.diff)
        assert header.diff is not None
        assert header.diff.master_id == fam.master_id
        assert header.diff.position_offset == sibling.position_offset
        assert header.diff.rows == ((), sibling.rows, sibling.rows)  # layer 0: re-rotation alone is exact
        restored = deserialize_blocks(restore_block(fam.master, sibling.diff, SHIFT))
        assert restored.header.block_ids == (sibling.block_id,)
        assert restored.header.position == MASTER_POSITION + sibling.position_offset
        assert restored.header.diff is None
        assert same_bits(restored.k[:, 0], sibling.k)
        assert same_bits(restored.v[:, 0], sibling.v)


def test_a_diff_is_a_small_fraction_of_its_full_block():
    fam = family(rows=(3,))
    sibling = fam.siblings[0]
    full = serialize_blocks(sibling.k.unsqueeze(1), sibling.v.unsqueeze(1), [sibling.block_id], FP)
    header = read_header(sibling.diff)
    row_bytes = 2 * 8 * 2  # heads * head_dim * bf16
    # layers 1 and 2 each: a K row, a V row at byte 64 (sections and layers on 64-byte boundaries)
    assert [(e.offset, e.length) for e in header.layers] == [(0, 0), (0, 64 + row_bytes), (128, 64 + row_bytes)]
    assert len(sibling.diff) - header.payload_offset == 128 + 64 + row_bytes
    assert len(sibling.diff) < len(full) / 3


def test_re_rotation_composes_and_offset_zero_is_identity():
    keys = torch.randn(BLOCK_ROWS := 5, 2, HEAD_DIM)
    there = SHIFT.shift(keys, 300)
    assert torch.allclose(SHIFT.shift(there, -300), keys, atol=1e-5)
    assert torch.allclose(SHIFT.shift(SHIFT.shift(keys, 100), 200), there, atol=1e-5)
    assert torch.equal(SHIFT.shift(keys, 0), keys)  # cos 1, sin 0: exact (no -0.0 among random keys)
    assert there.shape == (BLOCK_ROWS, 2, HEAD_DIM)
    with pytest.raises(ValueError, match="head_dim 8, this shift rotates 16"):
        RopeShift.for_theta(10000.0, 16).shift(keys, 1)


def test_a_sibling_equal_to_its_shifted_master_stores_no_rows():
    fam = family(rows=())
    header = read_header(fam.siblings[0].diff)
    assert header.diff is not None and header.diff.stored_rows == 0
    assert [e.length for e in header.layers] == [0] * LAYERS
    restored = deserialize_blocks(restore_block(fam.master, fam.siblings[0].diff, SHIFT))
    assert same_bits(restored.k[:, 0], fam.siblings[0].k)


def test_a_diff_is_not_decoded_as_if_it_were_a_full_block():
    fam = family()
    with pytest.raises(ValueError, match=f"is a diff against master {fam.master_id.hex()}: restore it"):
        deserialize_blocks(fam.siblings[0].diff)


def test_a_corrupt_diff_layer_is_detected_and_named():
    fam = family()
    diff = bytearray(fam.siblings[0].diff)
    header = read_header(diff)
    diff[header.payload_offset + header.layers[2].offset + 3] ^= 0x01
    with pytest.raises(CorruptBlockError, match="layer 2 checksum mismatch") as caught:
        restore_block(fam.master, diff, SHIFT)
    assert caught.value.layer == 2


def test_a_restorer_refuses_to_finish_before_every_layer_is_in():
    fam = family()
    restorer = DiffRestorer(fam.master, read_header(fam.siblings[0].diff), SHIFT)
    with pytest.raises(CorruptBlockError, match=r"layers \[0, 1, 2\] not restored"):
        restorer.finish()


def test_a_master_must_match_its_diff():
    fam, other = family(), family(salt="other")
    diff = read_header(fam.siblings[0].diff)
    with pytest.raises(ValueError, match="diff names master"):
        check_master(read_header(other.master), diff)
    with pytest.raises(ValueError, match="is not a diff block"):
        check_master(read_header(fam.master), read_header(fam.master))
    wrong_shape = serialize_blocks(
        torch.zeros(LAYERS + 1, 1, 16, 2, 8).bfloat16(),
        torch.zeros(LAYERS + 1, 1, 16, 2, 8).bfloat16(),
        [fam.master_id],
        FP,
    )
    with pytest.raises(ValueError, match="disagree on num_layers: 3 vs 4"):
        check_master(read_header(wrong_shape), diff)


def test_a_diff_must_be_written_against_matching_tensors():
    fam = family()
    with pytest.raises(ValueError, match="share one shape"):
        serialize_diff(
            fam.k,
            fam.v,
            fam.k[:2],
            fam.v[:2],
            block_id=fam.siblings[0].block_id,
            master_id=fam.master_id,
            fingerprint=FP,
            position_offset=1,
            shift=SHIFT,
        )


def test_a_header_with_rows_out_of_range_is_rejected():
    from agentserve.kv.block_header import encode_header

    fam = family()
    header = read_header(fam.siblings[0].diff)
    fields = {
        "fingerprint": FP,
        "dtype": "bfloat16",
        "kv_dtype": "native",
        "num_layers": LAYERS,
        "num_blocks": 1,
        "block_size": 16,
        "num_kv_heads": 2,
        "head_dim": HEAD_DIM,
        "block_ids": [fam.siblings[0].block_id.hex()],
        "diff": {"master": fam.master_id.hex(), "position_offset": 3, "rows": [[], [16], [2]]},
    }
    with pytest.raises(ValueError, match=r"diff rows of layer 1 must lie in \[0, 16\), got \[16\]"):
        read_header(encode_header(fields, list(header.layers)))
    fields["diff"]["rows"] = [[], [4, 2], [2]]
    with pytest.raises(ValueError, match="strictly increasing"):
        read_header(encode_header(fields, list(header.layers)))
