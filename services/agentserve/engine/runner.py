"""ModelRunner: turns scheduled sequences into one forward pass over the paged KV pool.

The runner owns no scheduling state; the engine decides what runs and hands it slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata, token_rows
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.sequence import Sequence

# layer -> (k, v), each `[num_blocks, block_size, kv_heads, head_dim]`.
LayerKVSource = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


class LayerLoadError(RuntimeError):
    """An external prefix could not deliver a layer (its load failed or timed out): the engine
    recomputes the sequence without it, so output stays exact."""


def _always_ready() -> bool:
    return True


@dataclass
class ExternalPrefix:
    """KV of a sequence's blocks [first_block, num_blocks) that lives outside this engine's pool.

    `load_layer(l)` returns that layer's K and V of those blocks (`[num_blocks - first_block,
    block_size, kv_heads, head_dim]` each); it is called just before layer l runs and may block
    until the layer has arrived (layerwise loading): a streaming loader can still be receiving
    later layers while earlier ones compute. It raises `LayerLoadError` if the layer never comes.
    `ready()` says whether layer 0 is in hand, i.e. whether a forward may start without waiting;
    `arrived()` whether every layer is (or the load failed): a forward over it then never waits.

    With `tail_tokens` > 0 the last block is a context's partial last block (a stored tail, see
    `kv.block_hash.tail_block_id`): only its first `tail_tokens` rows are KV of the sequence, the
    prefill computes the block's other rows, and the block is then a full block of the sequence.
    """

    num_blocks: int
    load_layer: LayerKVSource
    first_block: int = 0
    ready: Callable[[], bool] = _always_ready
    arrived: Callable[[], bool] = _always_ready
    tail_tokens: int = 0

    def __post_init__(self) -> None:
        if self.tail_tokens < 0 or (self.tail_tokens and self.num_blocks <= self.first_block):
            raise ValueError(f"tail_tokens must be >= 0 and need a block to sit in, got {self.tail_tokens}")

    @property
    def full_blocks(self) -> int:
        """Leading blocks of the sequence the prefix covers whole (all of them without a tail)."""
        return self.num_blocks - (1 if self.tail_tokens else 0)

    def num_tokens(self, block_size: int) -> int:
        """Leading tokens of the sequence whose KV the prefix (with the blocks before it) holds."""
        if self.tail_tokens >= block_size:
            raise ValueError(f"tail_tokens must be below the block size {block_size}, got {self.tail_tokens}")
        return self.full_blocks * block_size + self.tail_tokens


def block_prefix(k: torch.Tensor, v: torch.Tensor, block_size: int) -> ExternalPrefix:
    """A sequence's first T tokens' KV (`k`/`v` `[layers, T, kv_heads, head_dim]`, held whole) as
    an external prefix of blocks: the last one a tail of T % block_size rows when T is not whole
    blocks (the prefill computes the rest of that block)."""
    layers, num_tokens = k.shape[0], k.shape[1]
    num_blocks, tail = -(-num_tokens // block_size), num_tokens % block_size
    pad = num_blocks * block_size - num_tokens
    shape = (layers, num_blocks, block_size, *k.shape[2:])
    k_blocks = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).reshape(shape)
    v_blocks = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).reshape(shape)
    return ExternalPrefix(num_blocks, lambda layer: (k_blocks[layer], v_blocks[layer]), tail_tokens=tail)


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVPool, batch_invariant: bool = True):
        """`batch_invariant`: each sequence's logits do not depend on the batch it runs in
        (`attention` module docstring); off, decode takes SDPA and linears their fastest kernel."""
        model_dtype = model.lm_head.weight.dtype
        if pool.dtype != model_dtype:
            # Attention copies each layer's new K/V into the pool as they are, without a cast.
            raise ValueError(f"KV pool dtype {pool.dtype} differs from the model's {model_dtype}")
        weights_device = model.model.embed_tokens.weight.device
        if pool.device != weights_device:
            raise ValueError(f"KV pool device {pool.device} differs from the model's {weights_device}")
        self.model = model
        self.pool = pool
        self.device = pool.device  # each step's ids and row indices are built there
        self.batch_invariant = batch_invariant

    def prefill(
        self, seq: Sequence, num_cached: int, external: ExternalPrefix | None = None, external_start: int = 0
    ) -> torch.Tensor:
        """Compute KV for seq.token_ids[num_cached:] and return the last position's logits [vocab].

        With `external`, blocks [external_start, external.num_blocks) are filled layer by layer from
        it before each layer runs; they must lie inside the first `num_cached` tokens, but for a
        tail's rows past `num_cached`, which this forward overwrites with the KV it computes.
        `num_cached` need not be a whole number of blocks.
        """
        total = len(seq.token_ids)
        bs = self.pool.block_size
        meta = PrefillMetadata.build(seq.slots, bs, num_cached, total - num_cached, self.batch_invariant, self.device)
        ids = torch.as_tensor(seq.token_ids[num_cached:], dtype=torch.long, device=self.device)
        hook = None
        if external is not None and external.num_blocks > external_start:
            hook = self._layer_loader(external, seq.slots[external_start : external.num_blocks], external_start)
        positions = slice(num_cached, total)  # a range: the rotary tables are viewed, not indexed
        logits = self.model(ids, positions, self.pool, meta, logits_rows=slice(-1, None), before_layer=hook)
        return logits[0]

    def _layer_loader(self, external: ExternalPrefix, slots: list[int], start: int) -> Callable[[int], None]:
        """The before-layer hook writing external blocks [start, num_blocks) of one layer into `slots`."""
        skip = start - external.first_block

        def load(layer: int) -> None:
            k, v = external.load_layer(layer)
            self.pool.write_blocks(slots, k[skip:][None], v[skip:][None], range(layer, layer + 1))

        return load

    def prefill_staged(
        self, seq: Sequence, resident_slots: list[int], new_slots: list[int], external: ExternalPrefix
    ) -> torch.Tensor:
        """Prefill over a prefix of `external.num_blocks` blocks whose external part never enters the
        pool; returns the last position's logits [vocab].

        `resident_slots` hold the prefix's first blocks (at least `external.first_block` of them),
        `new_slots` the blocks from `external.full_blocks` on. Before layer l runs, that layer's
        whole prefix (resident blocks read from the pool, the rest from `external`) is put in a
        one-layer staging buffer the attention reads: the prefill holds one layer of the prefix.
        A tail (`external.tail_tokens`) is also written into `new_slots[0]`, whose other rows this
        forward computes: that block is then whole in the pool, like every new block.
        """
        bs = self.pool.block_size
        num_cached = external.num_tokens(bs)
        num_new = len(seq.token_ids) - num_cached
        tail = external.tail_tokens
        meta = PrefillMetadata(
            write_rows=token_rows(
                torch.as_tensor(new_slots, dtype=torch.long, device=self.device), tail, tail + num_new, bs
            ),
            total=len(seq.token_ids),
            num_cached=num_cached,
            block_size=bs,
            prefix_slots=torch.as_tensor(resident_slots, dtype=torch.long, device=self.device),
            prefix_start=None,
            batch_invariant=self.batch_invariant,
        )
        resident_rows = token_rows(meta.prefix_slots, 0, len(resident_slots) * bs, bs)
        skip = len(resident_slots) - external.first_block
        staging: tuple[torch.Tensor, torch.Tensor] | None = None

        external_tokens = num_cached - len(resident_slots) * bs

        def stage(layer: int) -> None:
            nonlocal staging
            blocks_k, blocks_v = external.load_layer(layer)
            if tail:
                layers = range(layer, layer + 1)
                self.pool.write_blocks(new_slots[:1], blocks_k[-1:][None], blocks_v[-1:][None], layers)
            # [tokens, heads, d]; a tail's rows past its tokens are not the prefix's
            k, v = (self.pool.stored(t[skip:].flatten(0, 1)[:external_tokens]) for t in (blocks_k, blocks_v))
            if not resident_slots:
                meta.staged_prefix = (k, v)  # the loader's buffer is the layer's whole prefix: no copy
                return
            if staging is None:
                staging = (k.new_empty((num_cached, *k.shape[1:])), v.new_empty((num_cached, *v.shape[1:])))
            pool_k, pool_v = self.pool.flat(layer)
            torch.cat([pool_k.index_select(0, resident_rows), k], out=staging[0])
            torch.cat([pool_v.index_select(0, resident_rows), v], out=staging[1])
            meta.staged_prefix = staging

        ids = torch.as_tensor(seq.token_ids[num_cached:], dtype=torch.long, device=self.device)
        positions = slice(num_cached, len(seq.token_ids))
        logits = self.model(ids, positions, self.pool, meta, logits_rows=slice(-1, None), before_layer=stage)
        return logits[0]

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """One token for each sequence (its last token's KV is computed now); logits [B, vocab]."""
        lengths = [len(s.token_ids) for s in seqs]
        meta = DecodeMetadata.build(
            [s.slots for s in seqs], self.pool.block_size, lengths, self.pool.dtype, self.batch_invariant, self.device
        )
        ids = torch.as_tensor([s.token_ids[-1] for s in seqs], dtype=torch.long, device=self.device)
        positions = torch.as_tensor([n - 1 for n in lengths], dtype=torch.long, device=self.device)
        return self.model(ids, positions, self.pool, meta)

    def verify(self, seqs: list[Sequence], drafts: list[list[int]]) -> list[torch.Tensor]:
        """Score each sequence's last token and its draft tokens in one forward: `[1 + len(draft),
        vocab]` logits per sequence, row j the target's next-token logits after draft token j.

        A sequence's rows are query rows of one attention over its context (read once for all of
        them, each row masked to its own position), and each row's logits are the ones a plain
        `decode` of that position gives, bit for bit under `batch_invariant`
        (`decode_attention.invariant_decode_attention`), so a greedy speculative decode emits a
        plain decode's tokens. All rows' KV is written before any row attends, so a draft
        position sees the drafts before it.
        """
        new_tokens = [1 + len(draft) for draft in drafts]
        lengths = [len(seq.token_ids) for seq in seqs]
        meta = DecodeMetadata.build(
            [seq.slots for seq in seqs],
            self.pool.block_size,
            lengths,
            self.pool.dtype,
            self.batch_invariant,
            self.device,
            new_tokens,
        )
        ids = [token for seq, draft in zip(seqs, drafts) for token in [seq.token_ids[-1], *draft]]
        positions = [n - 1 + j for n, k in zip(lengths, new_tokens) for j in range(k)]
        logits = self.model(
            torch.as_tensor(ids, dtype=torch.long, device=self.device),
            torch.as_tensor(positions, dtype=torch.long, device=self.device),
            self.pool,
            meta,
        )
        return list(torch.split(logits, new_tokens))
