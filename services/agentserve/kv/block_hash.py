"""Chained block ids: the one key for the engine's prefix cache, the KV store and routing.

A block id is H(parent id, model fingerprint, tenant salt, token ids). Because the parent id is
hashed in, equal ids mean equal tokens *and* an equal whole prefix, so a lookup by id never
returns KV computed under a different history. The tenant salt keeps one tenant's blocks
unreachable (and untimeable) from another's.
"""

from __future__ import annotations

import hashlib
import operator
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import SupportsIndex

BLOCK_ID_BYTES = 16


def check_block_id(block_id: bytes) -> None:
    if len(block_id) != BLOCK_ID_BYTES:
        raise ValueError(f"block id must be {BLOCK_ID_BYTES} bytes, got {len(block_id)}")


def checked_block_ids(block_ids: Sequence[bytes]) -> list[bytes]:
    """`block_ids` as bytes; ValueError naming the first malformed one (`block_ids[i]: ...`)."""
    ids = [bytes(b) for b in block_ids]
    for i, block_id in enumerate(ids):
        try:
            check_block_id(block_id)
        except ValueError as exc:
            raise ValueError(f"block_ids[{i}]: {exc}") from None
    return ids


# Domain separation: these digests can never collide with blake2b digests computed elsewhere
# for another purpose.
_PERSON = b"agentserve.kv.1"

_U32 = struct.Struct("<I")
_ROOT = b"\x00"
_CHILD = b"\x01"


def compute_block_id(
    parent: bytes | None,
    fingerprint: str,
    tenant_salt: str,
    token_ids: Sequence[int],
) -> bytes:
    """The id of one block whose tokens are `token_ids`, following block `parent` (None = first).

    Any number of tokens is accepted; callers normally hash only full blocks (`block_ids_for`).
    """
    return _hash(_parent_field(parent), _text_field(fingerprint), _text_field(tenant_salt), _pack_tokens(token_ids))


def tail_block_id(
    parent: bytes | None,
    fingerprint: str,
    tenant_salt: str,
    token_ids: Sequence[int],
    block_size: int,
) -> bytes:
    """The id of a context's partial last block (its tail): the `token_ids` after the full block
    `parent`, fewer than a block. The token count is hashed in, so a tail's id is never a full
    block's, nor another tail's of more or fewer tokens; the tail is stored as a whole block
    buffer whose rows past its tokens nobody reads."""
    if not 0 < len(token_ids) < block_size:
        raise ValueError(f"a tail holds 1 to {block_size - 1} tokens, got {len(token_ids)}")
    return compute_block_id(parent, fingerprint, tenant_salt, token_ids)


def block_ids_for(
    token_ids: Sequence[int],
    block_size: int,
    fingerprint: str,
    tenant_salt: str,
) -> list[bytes]:
    """Chained ids of the full blocks of `token_ids`; a trailing partial block gets no id.

    A partial block has no id because its KV is still being written: it cannot be shared yet.
    """
    if not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    packed = _pack_tokens(token_ids)  # validate and pack once, then hash slices of it
    block_bytes = block_size * 4
    # `_hash`'s input with the fields every full block shares joined once: the digest of a stream
    # does not depend on how it is split into updates.
    shared = _text_field(fingerprint) + _text_field(tenant_salt) + _U32.pack(block_size)
    ids: list[bytes] = []
    parent_field = _ROOT
    view = memoryview(packed)
    for start in range(0, len(packed) - block_bytes + 1, block_bytes):
        h = hashlib.blake2b(parent_field, digest_size=BLOCK_ID_BYTES, person=_PERSON)
        h.update(shared)
        h.update(view[start : start + block_bytes])
        block_id = h.digest()
        ids.append(block_id)
        parent_field = _CHILD + block_id
    return ids


def _hash(parent: bytes, fingerprint: bytes, salt: bytes, tokens: bytes | memoryview) -> bytes:
    # Every variable-length field is length-prefixed, so no two different inputs share an encoding.
    h = hashlib.blake2b(digest_size=BLOCK_ID_BYTES, person=_PERSON)
    h.update(parent)
    h.update(fingerprint)
    h.update(salt)
    h.update(_U32.pack(len(tokens) // 4))
    h.update(tokens)
    return h.digest()


def _parent_field(parent: bytes | None) -> bytes:
    if parent is None:
        return _ROOT
    if not isinstance(parent, (bytes, bytearray)) or len(parent) != BLOCK_ID_BYTES:
        raise ValueError(f"parent block id must be {BLOCK_ID_BYTES} bytes or None, got {parent!r}")
    return _CHILD + bytes(parent)


def _text_field(text: str) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"fingerprint and tenant salt must be str, got {type(text).__name__}")
    data = text.encode("utf-8")
    return _U32.pack(len(data)) + data


def _pack_tokens(token_ids: Sequence[int]) -> bytes:
    try:
        packed = array("I", token_ids)  # C unsigned int: 32 bits on every ILP32/LP64/LLP64 host
    except (OverflowError, TypeError):
        bad = next((t for t in token_ids if not _is_u32(t)), None)
        raise ValueError(f"token ids must be integers in [0, 2**32), got {bad!r}") from None
    if sys.byteorder == "big":
        packed.byteswap()  # ids must not depend on the host that computed them
    return packed.tobytes()


def _is_u32(token: object) -> bool:
    if not isinstance(token, SupportsIndex):
        return False
    try:
        return 0 <= operator.index(token) < 2**32
    except TypeError:  # an __index__ that returns a non-int
        return False
