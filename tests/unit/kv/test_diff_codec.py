"""The `xor-deflate` diff codec: rows stored as a lossless delta against the shifted master."""

from __future__ import annotations

import zlib

import pytest
import torch

from agentserve.common.checksum import crc32
from agentserve.kv.block_diff import full_block, restore_block, serialize_diff
from agentserve.kv.block_format import deserialize_blocks
from agentserve.kv.block_header import CorruptBlockError, LayerExtent, encode_header, read_header
from agentserve.kv.diff_codec import decode_delta, encode_delta
from agentserve.kv.diff_layout import ROWS, XOR_DEFLATE
from tests.support.diff_blocks import FP, LAYERS, SHIFT, block_id, family

pytestmark = pytest.mark.unit

INT = {2: torch.int16, 4: torch.int32}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(INT[a.element_size()]), b.view(INT[b.element_size()]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_coded_diff_restores_bit_for_bit_and_names_its_codec(dtype):
    fam = family(dtype=dtype, codec=XOR_DEFLATE)
    for sibling in fam.siblings:
        header = read_header(sibling.diff)
        assert header.diff is not None
        assert (header.diff.codec, header.diff.rows) == (XOR_DEFLATE, ((), sibling.rows, sibling.rows))
        assert header.layers[0].length == 0  # no rows, no bytes
        restored = deserialize_blocks(restore_block(fam.master, sibling.diff, SHIFT))
        assert same_bits(restored.k[:, 0], sibling.k)
        assert same_bits(restored.v[:, 0], sibling.v)


def test_rows_close_to_the_master_cost_a_fraction_of_their_raw_bytes():
    """A row whose key moved only in its last bits (a fresh rotation) and whose value did not move
    at all: the delta is nearly all zero bits."""
    gen = torch.Generator().manual_seed(1)
    k, v = torch.randn(LAYERS, 16, 2, 8, generator=gen), torch.randn(LAYERS, 16, 2, 8, generator=gen)
    sk = SHIFT.shift(k, 9)
    sk[:, :4] = (sk[:, :4].view(torch.int32) ^ 1).view(torch.float32)  # the last mantissa bit flipped
    args = {"block_id": block_id("near"), "master_id": block_id("m"), "fingerprint": FP, "position_offset": 9}
    raw = serialize_diff(k, v, sk, v, shift=SHIFT, codec=ROWS, **args)
    coded = serialize_diff(k, v, sk, v, shift=SHIFT, codec=XOR_DEFLATE, **args)
    raw_payload = len(raw) - read_header(raw).payload_offset
    coded_payload = len(coded) - read_header(coded).payload_offset
    assert read_header(coded).diff.rows == ((0, 1, 2, 3),) * LAYERS
    assert coded_payload * 4 < raw_payload
    master = full_block(k, v, block_id("m"), FP, position=3)
    assert same_bits(deserialize_blocks(restore_block(master, coded, SHIFT)).k[:, 0], sk)


def test_a_corrupt_coded_layer_is_detected_and_named():
    fam = family(codec=XOR_DEFLATE)
    diff = bytearray(fam.siblings[0].diff)
    header = read_header(diff)
    diff[header.payload_offset + header.layers[1].offset + 2] ^= 0x10
    with pytest.raises(CorruptBlockError, match="layer 1 checksum mismatch"):
        restore_block(fam.master, diff, SHIFT)


@pytest.mark.parametrize(
    "payload, message",
    [
        (zlib.compress(bytes(10)), "inflates to other than 64 bytes"),  # too short
        (zlib.compress(bytes(65)), "inflates to other than 64 bytes"),  # too long: never inflated past 64
        (b"not deflate", "does not inflate"),
        (zlib.compress(bytes(64)) + b"x", "inflates to other than 64 bytes"),  # trailing bytes
    ],
)
def test_a_payload_that_does_not_inflate_to_the_rows_is_corrupt(payload, message):
    predicted = torch.zeros(2, 8)  # 64 bytes of float32
    with pytest.raises(CorruptBlockError, match=message):
        decode_delta(memoryview(payload), predicted, layer=3)


def test_encode_and_decode_are_inverse_on_special_values():
    rows = torch.tensor([[0.0, -0.0, float("inf"), float("nan")], [1e-40, -1.5, 3.0, 7.0]])
    predicted = torch.tensor([[-0.0, 0.0, 1.0, 2.0], [1e-40, -1.5, 3.5, -7.0]])
    back = decode_delta(memoryview(encode_delta(rows, predicted)), predicted, layer=0)
    assert same_bits(back, rows)


def test_a_header_naming_an_unknown_codec_or_misplacing_bytes_is_rejected():
    fam = family(codec=XOR_DEFLATE)
    header = read_header(fam.siblings[0].diff)
    fields = {
        "fingerprint": FP,
        "dtype": "bfloat16",
        "kv_dtype": "native",
        "num_layers": LAYERS,
        "num_blocks": 1,
        "block_size": 16,
        "num_kv_heads": 2,
        "head_dim": 8,
        "block_ids": [fam.siblings[0].block_id.hex()],
        "diff": {"master": fam.master_id.hex(), "position_offset": 3, "rows": [[], [2], [2]], "codec": "gzip"},
    }
    with pytest.raises(ValueError, match="diff codec must be one of rows, xor-deflate, got 'gzip'"):
        read_header(encode_header(fields, list(header.layers)))
    fields["diff"]["codec"] = XOR_DEFLATE
    empty_layer_with_rows = [header.layers[0], LayerExtent(0, 0, crc32(b"")), header.layers[2]]
    with pytest.raises(ValueError, match="must hold bytes exactly when it has rows"):
        read_header(encode_header(fields, empty_layer_with_rows))
    gap = [header.layers[0], header.layers[1], LayerExtent(header.layers[2].offset + 64, 10, 0)]
    with pytest.raises(ValueError, match="layer extents do not match"):
        read_header(encode_header(fields, gap))


def test_an_unknown_codec_is_refused_when_writing():
    fam = family()
    with pytest.raises(ValueError, match="codec must be one of rows, xor-deflate, got 'lz4'"):
        serialize_diff(
            fam.k,
            fam.v,
            fam.k,
            fam.v,
            block_id=block_id("x"),
            master_id=fam.master_id,
            fingerprint=FP,
            position_offset=0,
            shift=SHIFT,
            codec="lz4",
        )
