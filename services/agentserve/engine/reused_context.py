"""A reused prompt's KV as store blocks (TokenDance, issue 16): each shared block's master stored
once, each prompt's copy of it as a diff against that master, its private tokens as full blocks;
and the prompt's KV read back from them, bit for bit what the engine had.

What a prompt holds of a shared block (`ReusedPrefill.siblings`) is the master with keys
re-rotated, except the rows recomputed in place; `kv.block_diff` stores only the rows whose bits
differ (with `xor-deflate`, as a lossless delta against the shifted master). A round's leader
holds the masters themselves: its pieces name the master blocks, nothing more is stored. A
prompt served exactly (asked, or fallen back) stores its shared blocks as full blocks: its KV is
the full recompute's, not its master's.

Every piece is cut on its own token grid into chunks of at most `chunk_tokens` (a diff chunk is
read against the master chunk at the same offset). Block ids hash the piece's bytes and the
position its keys were rotated for (`_content_id`): a master computed twice from two leaders'
prompts gets two ids, so a diff is never restored against a master it was not written against.

`ContextLayout` is the handle a later turn or a decode engine reads the prompt back with
(`assemble`): the pieces in prompt order. Diffs are restored by `fabric.chunks.DiffAssembler`,
the receiver's path: layer by layer as the run's chunks land.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from agentserve.contracts.context import ContextLayout, Piece, tokens_digest
from agentserve.contracts.segments import SegmentedPrompt, SharedBlock, Sibling
from agentserve.engine.shared_context import MasterKV, ReusedPrefill
from agentserve.fabric.chunks import Masters, assembler_for, split_run
from agentserve.kv.block_diff import full_block, serialize_diff
from agentserve.kv.block_format import deserialize_blocks
from agentserve.kv.block_hash import BLOCK_ID_BYTES
from agentserve.kv.diff_layout import DIFF_CODECS, XOR_DEFLATE
from agentserve.kv.rope_shift import RopeShift

DEFAULT_CHUNK_TOKENS = 128
_PERSON = b"agentserve.ctx.1"  # domain separation from the chained prefix ids (`kv.block_hash`)

Block = tuple[bytes, bytes]  # (block id, buffer in the block format)


@dataclass(frozen=True)
class PersistedPrompt:
    layout: ContextLayout
    blocks: list[Block]  # what to store for this prompt (its masters apart: `ContextBlocks.masters`)


# Store reads: the buffers of `ids` in order, None for one the store does not hold.
Fetch = Callable[[Sequence[bytes]], Sequence[bytes | bytearray | None]]


class MissingBlockError(LookupError):
    """A piece (or the master of a diff) is not in the store: the prompt must be recomputed."""


class ContextBlocks:
    """Turns a round's masters and reused prefills into store blocks and back, for one model
    (`fingerprint`, its RoPE `shift`) and one tenant (`namespace` is hashed into every id)."""

    def __init__(
        self,
        fingerprint: str,
        shift: RopeShift,
        namespace: str = "",
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        codec: str = XOR_DEFLATE,
    ) -> None:
        if chunk_tokens <= 0:
            raise ValueError(f"chunk_tokens must be positive, got {chunk_tokens}")
        if codec not in DIFF_CODECS:
            raise ValueError(f"codec must be one of {', '.join(DIFF_CODECS)}, got {codec!r}")
        self.fingerprint = fingerprint
        self.shift = shift
        self.namespace = namespace
        self.chunk_tokens = chunk_tokens
        self.codec = codec

    # ---- writing -------------------------------------------------------------------------

    def masters(self, masters: Iterable[MasterKV]) -> list[Block]:
        """Every master's chunks as full blocks recording their positions (store them before the
        diffs against them)."""
        out: list[Block] = []
        for master in masters:
            for at, end in self._chunks(master.k.shape[1]):
                k, v = master.k[:, at:end], master.v[:, at:end]
                out.append(self._full(k, v, master.start + at))
        return out

    def prompt(
        self,
        prompt: SegmentedPrompt,
        prefill: ReusedPrefill,
        masters: Mapping[str, MasterKV],
        prefix: ContextLayout | None = None,
    ) -> PersistedPrompt:
        """The blocks of one prompt's KV as `prefill` holds it, against `masters` (by content id).

        `prefix`: the stored layout the prefill restored the prompt's first tokens from (they
        end before its first shared block); its pieces stand for those rows as they are, so only
        the rows after it are stored."""
        if prefill.k.shape[1] != len(prompt.token_ids):
            raise ValueError(f"the prefill holds {prefill.k.shape[1]} tokens, the prompt {len(prompt.token_ids)}")
        siblings = {s.master_id: s for s in prefill.siblings}
        pieces: list[Piece] = list(prefix.pieces) if prefix is not None else []
        blocks: list[Block] = []
        held = prefix.num_tokens if prefix is not None else 0
        start = 0
        for segment in prompt.segments:
            end = start + len(segment.token_ids)
            shared = segment if isinstance(segment, SharedBlock) else None
            if start < held:  # rows the prefix holds: only a private segment's rows after it are new
                if shared is not None:
                    raise ValueError(f"the prefix covers shared block {shared.content_id!r}")
                start = min(held, end)
            sibling = None if shared is None else siblings.get(shared.content_id)
            for at, stop in self._chunks(end - start):
                rows = slice(start + at, start + stop)
                k, v = prefill.k[:, rows], prefill.v[:, rows]
                if shared is None or sibling is None:
                    block_id, data = self._full(k, v, start + at)
                    pieces.append(Piece(rows.start, rows.stop, block_id))
                    blocks.append((block_id, data))
                    continue
                master = self._master_of(shared, sibling, masters)
                master_id = self._content_id(master.k[:, at:stop], master.v[:, at:stop], master.start + at)
                if sibling.position_offset == 0 and not sibling.recomputed_rows:  # the leader: the master itself
                    pieces.append(Piece(rows.start, rows.stop, master_id))
                    continue
                block_id = self._content_id(k, v, start + at)
                diff = serialize_diff(
                    master.k[:, at:stop],
                    master.v[:, at:stop],
                    k,
                    v,
                    block_id=block_id,
                    master_id=master_id,
                    fingerprint=self.fingerprint,
                    position_offset=sibling.position_offset,
                    shift=self.shift,
                    codec=self.codec,
                )
                pieces.append(Piece(rows.start, rows.stop, block_id, master_id))
                blocks.append((block_id, bytes(diff)))
            start = end
        layout = ContextLayout(start, tuple(pieces), tokens_digest(prompt.token_ids))
        return PersistedPrompt(layout, blocks)

    # ---- reading -------------------------------------------------------------------------

    def assemble(self, layout: ContextLayout, fetch: Fetch) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt's K and V `[layers, T, kv_heads, head_dim]` from the store, each diff
        restored against its master as a receiver restores a diff run; MissingBlockError naming the
        first piece the store lacks."""
        master_ids = layout.master_ids
        found = list(fetch(master_ids + layout.block_ids))
        if len(found) != len(master_ids) + len(layout.pieces):
            raise ValueError(f"fetch returned {len(found)} buffers for {len(master_ids) + len(layout.pieces)} ids")
        held = dict(zip(master_ids, found[: len(master_ids)]))
        masters = Masters(held.get, self.shift)
        ks, vs = [], []
        for piece, data in zip(layout.pieces, found[len(master_ids) :]):
            if data is None or (piece.master_id is not None and held[piece.master_id] is None):
                missing = piece.block_id if data is None else piece.master_id
                assert missing is not None
                raise MissingBlockError(
                    f"block {missing.hex()} of prompt rows [{piece.start}, {piece.end}) is not stored"
                )
            if piece.master_id is not None:
                data = _restored(data, masters)
            blocks = deserialize_blocks(data, expected_fingerprint=self.fingerprint)
            ks.append(blocks.k[:, 0])
            vs.append(blocks.v[:, 0])
        return torch.cat(ks, dim=1), torch.cat(vs, dim=1)

    # ---- helpers -------------------------------------------------------------------------

    def _chunks(self, num_tokens: int) -> list[tuple[int, int]]:
        return [(at, min(at + self.chunk_tokens, num_tokens)) for at in range(0, num_tokens, self.chunk_tokens)]

    def _full(self, k: torch.Tensor, v: torch.Tensor, position: int) -> Block:
        block_id = self._content_id(k, v, position)
        return block_id, bytes(full_block(k.contiguous(), v.contiguous(), block_id, self.fingerprint, position))

    def _content_id(self, k: torch.Tensor, v: torch.Tensor, position: int) -> bytes:
        digest = hashlib.blake2b(digest_size=BLOCK_ID_BYTES, person=_PERSON)
        for text in (self.fingerprint, self.namespace, str(position), str(tuple(k.shape)), str(k.dtype)):
            digest.update(text.encode() + b"\x00")
        for tensor in (k, v):
            digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
        return digest.digest()

    @staticmethod
    def _master_of(segment: SharedBlock, sibling: Sibling, masters: Mapping[str, MasterKV]) -> MasterKV:
        master = masters.get(segment.content_id)
        if master is None or master.block.token_ids != segment.token_ids:
            raise ValueError(f"no master with the tokens of shared block {segment.content_id!r}")
        if sibling.num_tokens != len(segment.token_ids):
            raise ValueError(f"shared block {segment.content_id!r}: the sibling covers {sibling.num_tokens} tokens")
        return master


def _restored(diff: bytes | bytearray, masters: Masters) -> bytearray:
    """A diff restored as a receiver does (`DiffAssembler`), one layer per chunk as it lands."""
    chunks = split_run(diff, max_layers=1)
    assembler = assembler_for(chunks[0].header, masters)
    for chunk in chunks:
        assembler.add(chunk.offset, chunk.data)
    if not assembler.complete:
        raise ValueError("diff run ended before its last layer")
    return assembler.buffer
