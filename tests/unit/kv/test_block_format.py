import ctypes
import os
import warnings

import pytest
import torch

from agentserve.kv.block_format import (
    PREFIX_SIZE,
    CorruptBlockError,
    FingerprintMismatchError,
    decode_layers,
    deserialize_blocks,
    header_size,
    payload_range,
    read_header,
    serialize_blocks,
)
from agentserve.kv.block_hash import block_ids_for

pytestmark = pytest.mark.unit

FP = "tiny-llama@0123abcd"
SHAPE = (4, 3, 16, 2, 8)  # layers, blocks, block_size, kv heads, head_dim


def make_kv(dtype=torch.float32, shape=SHAPE, seed=0):
    gen = torch.Generator().manual_seed(seed)
    k = torch.randn(shape, generator=gen).to(dtype)
    v = torch.randn(shape, generator=gen).to(dtype)
    num_blocks, block_size = shape[1], shape[2]
    block_ids = block_ids_for(list(range(num_blocks * block_size)), block_size, FP, "t")
    return k, v, block_ids


def bits(t):
    return t.contiguous().view(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_native_round_trip_is_bit_exact(dtype):
    k, v, block_ids = make_kv(dtype)
    out = deserialize_blocks(serialize_blocks(k, v, block_ids, FP), expected_fingerprint=FP)
    assert out.k.dtype == dtype and out.k.shape == SHAPE
    assert torch.equal(bits(out.k), bits(k)) and torch.equal(bits(out.v), bits(v))
    assert out.layers == range(4)


def test_header_describes_the_blocks():
    k, v, block_ids = make_kv(torch.bfloat16)
    buf = serialize_blocks(k, v, block_ids, FP)
    assert bytes(buf[:4]) == b"ASKV"
    header = read_header(buf[: header_size(buf[:PREFIX_SIZE])])
    assert header.version == 1
    assert header.fingerprint == FP
    assert header.dtype == torch.bfloat16 and header.kv_dtype == "native"
    assert (header.num_layers, header.num_blocks, header.block_size, header.num_kv_heads, header.head_dim) == SHAPE
    assert header.block_ids == tuple(block_ids)
    assert header.payload_offset % 64 == 0
    assert [e.offset for e in header.layers] == [i * header.layers[1].offset for i in range(4)]


def test_layer_range_equals_slice_of_full():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    part = deserialize_blocks(buf, layers=range(1, 3))
    assert part.layers == range(1, 3)
    assert torch.equal(part.k, k[1:3]) and torch.equal(part.v, v[1:3])


def test_positioned_read_of_a_layer_range_from_a_file(tmp_path):
    k, v, block_ids = make_kv(torch.float16)
    path = tmp_path / "blocks.askv"
    path.write_bytes(serialize_blocks(k, v, block_ids, FP))
    fd = os.open(path, os.O_RDONLY)
    try:
        size = header_size(os.pread(fd, PREFIX_SIZE, 0))
        header = read_header(os.pread(fd, size, 0))
        offset, length = payload_range(header, 2, 4)
        payload = bytearray(length)
        assert os.preadv(fd, [payload], offset) == length
    finally:
        os.close(fd)
    out = decode_layers(header, payload, range(2, 4), expected_fingerprint=FP)
    assert torch.equal(out.k, k[2:4]) and torch.equal(out.v, v[2:4])


def test_writable_buffer_is_zero_copy():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    out = deserialize_blocks(buf)
    start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert start <= out.k.data_ptr() < start + len(buf)
    del buf  # the tensors keep the buffer alive
    assert torch.equal(out.k, k)


def test_read_only_buffer_is_copied_without_warning():
    k, v, block_ids = make_kv()
    data = bytes(serialize_blocks(k, v, block_ids, FP))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = deserialize_blocks(data)
    out.k.zero_()
    assert torch.equal(deserialize_blocks(data).k, k)


def test_flipped_payload_byte_in_layer_2_names_layer_2():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    header = read_header(buf)
    offset, length = payload_range(header, 2, 3)
    buf[offset + length // 2] ^= 0x01
    with pytest.raises(CorruptBlockError, match="layer 2 checksum mismatch") as info:
        deserialize_blocks(buf)
    assert info.value.layer == 2
    assert isinstance(info.value, ValueError)
    assert torch.equal(deserialize_blocks(buf, layers=range(0, 2)).k, k[:2])  # other layers still readable


def test_flipped_header_byte_raises():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    buf[PREFIX_SIZE + 10] ^= 0x01
    with pytest.raises(ValueError, match="header corrupt"):
        deserialize_blocks(buf)


def test_a_header_parsed_once_is_reused_and_a_flipped_copy_still_fails():
    from agentserve.kv import block_header

    k, v, block_ids = make_kv(seed=7)
    buf = serialize_blocks(k, v, block_ids, FP)
    first = read_header(buf)
    hits = block_header._parse_body_cached.cache_info().hits
    assert read_header(bytes(buf)) is first  # same bytes: the cached (immutable) header
    assert block_header._parse_body_cached.cache_info().hits == hits + 1
    flipped = bytearray(buf)
    flipped[PREFIX_SIZE + 10] ^= 0x01
    with pytest.raises(ValueError, match="header corrupt"):
        read_header(flipped)
    wrong_crc = bytearray(buf)
    wrong_crc[PREFIX_SIZE - 1] ^= 0x01  # the stored checksum itself
    with pytest.raises(ValueError, match="header corrupt"):
        read_header(wrong_crc)


def test_bad_magic_version_and_truncation_raise():
    k, v, block_ids = make_kv()
    good = serialize_blocks(k, v, block_ids, FP)
    with pytest.raises(ValueError, match="magic"):
        deserialize_blocks(b"XXXX" + bytes(good[4:]))
    bad_version = bytearray(good)
    bad_version[4] = 3
    with pytest.raises(ValueError, match="version 3"):
        deserialize_blocks(bad_version)
    other_version = bytearray(good)
    other_version[4] = 2  # the diff format's version, on a full block's header
    with pytest.raises(ValueError, match="version 1 disagrees with the prefix's 2"):
        deserialize_blocks(other_version)
    with pytest.raises(ValueError, match="truncated"):
        deserialize_blocks(good[:10])
    with pytest.raises(ValueError, match="truncated"):
        deserialize_blocks(good[:100])
    with pytest.raises(ValueError, match="truncated"):
        deserialize_blocks(good[:-1])


def test_wrong_fingerprint_raises():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    with pytest.raises(FingerprintMismatchError, match=f"block belongs to model {FP}, expected other"):
        deserialize_blocks(buf, expected_fingerprint="other")
    with pytest.raises(FingerprintMismatchError):
        decode_layers(read_header(buf), b"", range(0, 1), expected_fingerprint="other")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_round_trip_within_tolerance(dtype):
    k, v, block_ids = make_kv(dtype, shape=(4, 8, 16, 2, 64))
    k[1, 3] *= 1000.0  # a block with a very different range gets its own scale
    out = deserialize_blocks(serialize_blocks(k, v, block_ids, FP, kv_dtype="fp8_e4m3"))
    assert out.k.dtype == dtype
    for ref, got in ((k, out.k), (v, out.v)):
        ref, got = ref.float(), got.float()
        err = (got - ref).abs()
        assert (err.norm() / ref.norm()).item() < 0.07
        amax = ref.abs().amax(dim=(2, 3, 4), keepdim=True)
        assert bool((err <= amax / 16).all())  # 3 mantissa bits: error <= 1/16 of the block's range


def test_fp8_shrinks_bytes():
    shape = (4, 8, 16, 2, 64)
    k, v, block_ids = make_kv(torch.float32, shape=shape)
    fp32 = len(serialize_blocks(k, v, block_ids, FP))
    bf16 = len(serialize_blocks(k.bfloat16(), v.bfloat16(), block_ids, FP))
    fp8 = len(serialize_blocks(k, v, block_ids, FP, kv_dtype="fp8_e4m3"))
    assert fp8 / bf16 == pytest.approx(0.5, rel=0.05)
    assert fp8 / fp32 == pytest.approx(0.25, rel=0.05)


def test_fp8_layer_range_dtype_override_and_zero_block():
    k, v, block_ids = make_kv(torch.bfloat16)
    k[2, 1] = 0
    buf = serialize_blocks(k, v, block_ids, FP, kv_dtype="fp8_e4m3")
    full = deserialize_blocks(buf, dtype=torch.float32)
    part = deserialize_blocks(buf, layers=range(2, 3), dtype=torch.float32)
    assert part.k.dtype == torch.float32
    assert torch.equal(part.k, full.k[2:3]) and torch.equal(part.v, full.v[2:3])
    assert bool((part.k[0, 1] == 0).all())


def test_fp8_rejects_non_finite_kv():
    k, v, block_ids = make_kv()
    k[0, 0, 0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="inf or NaN"):
        serialize_blocks(k, v, block_ids, FP, kv_dtype="fp8_e4m3")


def test_serialize_validates_inputs():
    k, v, block_ids = make_kv()
    with pytest.raises(ValueError, match="kv_dtype"):
        serialize_blocks(k, v, block_ids, FP, kv_dtype="int8")
    with pytest.raises(ValueError, match="share one shape"):
        serialize_blocks(k, v[:, :2], block_ids, FP)
    with pytest.raises(ValueError, match="block ids"):
        serialize_blocks(k, v, block_ids[:2], FP)
    with pytest.raises(ValueError, match="unsupported KV dtype"):
        serialize_blocks(k.to(torch.int32), v.to(torch.int32), block_ids, FP)


def test_invalid_layer_ranges_raise():
    k, v, block_ids = make_kv()
    buf = serialize_blocks(k, v, block_ids, FP)
    header = read_header(buf)
    for layers in (range(0, 5), range(2, 2), range(0, 4, 2), range(-1, 2)):
        with pytest.raises(ValueError, match="layers must be"):
            deserialize_blocks(buf, layers=layers)
    with pytest.raises(ValueError, match="layers must be"):
        payload_range(header, 3, 5)
    with pytest.raises(ValueError, match="truncated"):
        decode_layers(header, b"\0" * 8, range(0, 1))
