import hashlib
import struct

import numpy as np
import pytest

from agentserve.kv.block_hash import BLOCK_ID_BYTES, block_ids_for, compute_block_id

pytestmark = pytest.mark.unit

FP = "llama-tiny@abc123"
SALT = "tenant-a"


def test_id_is_16_bytes_and_deterministic():
    a = compute_block_id(None, FP, SALT, [1, 2, 3, 4])
    assert isinstance(a, bytes) and len(a) == BLOCK_ID_BYTES
    assert compute_block_id(None, FP, SALT, (1, 2, 3, 4)) == a


def test_encoding_is_pinned():
    # Ids are persisted keys in the store: changing the encoding silently orphans every stored block.
    fp, salt = FP.encode(), SALT.encode()
    h = hashlib.blake2b(digest_size=16, person=b"agentserve.kv.1")
    h.update(b"\x00")
    h.update(struct.pack("<I", len(fp)) + fp)
    h.update(struct.pack("<I", len(salt)) + salt)
    h.update(struct.pack("<I4I", 4, 1, 2, 3, 4))
    assert compute_block_id(None, FP, SALT, [1, 2, 3, 4]) == h.digest()
    assert compute_block_id(None, "fp", "salt", [1, 2, 3, 4]).hex() == "3c865dc43ad19d9e1af50a462d8fb125"


def test_same_tokens_and_prefix_give_same_ids():
    tokens = list(range(100, 140))
    short = block_ids_for(tokens[:20], 8, FP, SALT)
    long = block_ids_for(tokens, 8, FP, SALT)
    assert len(short) == 2 and len(long) == 5
    assert long[:2] == short


def test_chain_matches_compute_block_id():
    tokens = list(range(12))
    ids = block_ids_for(tokens, 4, FP, SALT)
    parent = None
    for i, block_id in enumerate(ids):
        parent = compute_block_id(parent, FP, SALT, tokens[4 * i : 4 * i + 4])
        assert block_id == parent


def test_only_full_blocks_get_ids():
    assert len(block_ids_for(list(range(10)), 4, FP, SALT)) == 2
    assert block_ids_for([1, 2, 3], 4, FP, SALT) == []
    assert block_ids_for([], 4, FP, SALT) == []


def test_different_tenant_salt_gives_different_id():
    assert compute_block_id(None, FP, "tenant-a", [1, 2]) != compute_block_id(None, FP, "tenant-b", [1, 2])


def test_different_fingerprint_gives_different_id():
    assert compute_block_id(None, "model-a", SALT, [1, 2]) != compute_block_id(None, "model-b", SALT, [1, 2])


def test_different_parent_gives_different_id():
    p1 = compute_block_id(None, FP, SALT, [1])
    p2 = compute_block_id(None, FP, SALT, [2])
    ids = {compute_block_id(p, FP, SALT, [7, 8]) for p in (None, p1, p2)}
    assert len(ids) == 3


def test_an_earlier_token_changes_every_later_id():
    a = block_ids_for([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 2, FP, SALT)
    b = block_ids_for([0, 1, 2, 99, 4, 5, 6, 7, 8, 9], 2, FP, SALT)
    assert a[0] == b[0]
    assert all(x != y for x, y in zip(a[1:], b[1:]))


def test_fields_are_length_prefixed():
    assert compute_block_id(None, "ab", "c", [1]) != compute_block_id(None, "a", "bc", [1])
    assert compute_block_id(None, FP, SALT, [1, 2]) != compute_block_id(None, FP, SALT, [1, 2, 0])


def test_numpy_token_ids_match_lists():
    tokens = np.arange(32, dtype=np.int64)
    assert block_ids_for(tokens, 8, FP, SALT) == block_ids_for(list(range(32)), 8, FP, SALT)


def test_largest_token_id_is_accepted():
    compute_block_id(None, FP, SALT, [2**32 - 1])


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "7", None])
def test_invalid_token_ids_raise(bad):
    with pytest.raises(ValueError, match="token ids must be integers"):
        block_ids_for([1, 2, bad, 4], 2, FP, SALT)
    with pytest.raises(ValueError, match="token ids must be integers"):
        compute_block_id(None, FP, SALT, [bad])


@pytest.mark.parametrize("block_size", [0, -4, 2.0])
def test_invalid_block_size_raises(block_size):
    with pytest.raises(ValueError, match="block_size"):
        block_ids_for([1, 2, 3, 4], block_size, FP, SALT)


def test_invalid_parent_raises():
    with pytest.raises(ValueError, match="parent block id"):
        compute_block_id(b"short", FP, SALT, [1])
