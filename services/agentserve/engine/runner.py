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
    """KV of a sequence's full blocks [first_block, num_blocks) that lives outside this engine's pool.

    `load_layer(l)` returns that layer's K and V of those blocks (`[num_blocks - first_block,
    block_size, kv_heads, head_dim]` each); it is called just before layer l runs and may block
    until the layer has arrived (layerwise loading): a streaming loader can still be receiving
    later layers while earlier ones compute. It raises `LayerLoadError` if the layer never comes.
    `ready()` says whether layer 0 is in hand, i.e. whether a forward may start without waiting;
    `arrived()` whether every layer is (or the load failed): a forward over it then never waits.
    """

    num_blocks: int
    load_layer: LayerKVSource
    first_block: int = 0
    ready: Callable[[], bool] = _always_ready
    arrived: Callable[[], bool] = _always_ready


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVPool, batch_invariant: bool = True):
        """`batch_invariant`: each sequence's logits do not depend on the batch it runs in
        (`attention` module docstring); off, decode takes SDPA and linears their fastest kernel."""
        model_dtype = model.lm_head.weight.dtype
        if pool.dtype != model_dtype:
            # Attention copies each layer's new K/V into the pool as they are, without a cast.
            raise ValueError(f"KV pool dtype {pool.dtype} differs from the model's {model_dtype}")
        self.model = model
        self.pool = pool
        self.batch_invariant = batch_invariant

    def prefill(
        self, seq: Sequence, num_cached: int, external: ExternalPrefix | None = None, external_start: int = 0
    ) -> torch.Tensor:
        """Compute KV for seq.token_ids[num_cached:] and return the last position's logits [vocab].

        With `external`, blocks [external_start, external.num_blocks) are filled layer by layer from
        it before each layer runs; they must lie inside the first `num_cached` tokens.
        """
        total = len(seq.token_ids)
        bs = self.pool.block_size
        meta = PrefillMetadata.build(seq.slots, bs, num_cached, total - num_cached, self.batch_invariant)
        ids = torch.as_tensor(seq.token_ids[num_cached:], dtype=torch.long)
        hook = None
        if external is not None and external.num_blocks > external_start:
            hook = self._layer_loader(external, seq.slots[external_start : external.num_blocks], external_start)
        positions = slice(num_cached, total)  # a range: the rotary tables are viewed, not indexed
        logits = self.model(ids, positions, self.pool, meta, logits_rows=slice(-1, None), before_layer=hook)
        return logits[0]

    def _layer_loader(self, external: ExternalPrefix, slots: list[int], start: int):
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
        `new_slots` the blocks from `external.num_blocks` on. Before layer l runs, that layer's
        whole prefix (resident blocks read from the pool, the rest from `external`) is put in a
        one-layer staging buffer the attention reads: the prefill holds one layer of the prefix.
        """
        bs = self.pool.block_size
        num_cached = external.num_blocks * bs
        num_new = len(seq.token_ids) - num_cached
        meta = PrefillMetadata(
            write_rows=token_rows(torch.as_tensor(new_slots, dtype=torch.long), 0, num_new, bs),
            total=len(seq.token_ids),
            num_cached=num_cached,
            block_size=bs,
            prefix_slots=torch.as_tensor(resident_slots, dtype=torch.long),
            prefix_start=None,
            batch_invariant=self.batch_invariant,
        )
        resident_rows = token_rows(meta.prefix_slots, 0, len(resident_slots) * bs, bs)
        skip = len(resident_slots) - external.first_block
        staging: tuple[torch.Tensor, torch.Tensor] | None = None

        def stage(layer: int) -> None:
            nonlocal staging
            # [tokens, heads, d]
            k, v = (t[skip:].flatten(0, 1).to(self.pool.dtype) for t in external.load_layer(layer))
            if not resident_slots:
                meta.staged_prefix = (k, v)  # the loader's buffer is the layer's whole prefix: no copy
                return
            if staging is None:
                staging = (k.new_empty((num_cached, *k.shape[1:])), v.new_empty((num_cached, *v.shape[1:])))
            pool_k, pool_v = self.pool.flat(layer)
            torch.cat([pool_k.index_select(0, resident_rows), k], out=staging[0])
            torch.cat([pool_v.index_select(0, resident_rows), v], out=staging[1])
            meta.staged_prefix = staging

        ids = torch.as_tensor(seq.token_ids[num_cached:], dtype=torch.long)
        positions = slice(num_cached, len(seq.token_ids))
        logits = self.model(ids, positions, self.pool, meta, logits_rows=slice(-1, None), before_layer=stage)
        return logits[0]

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """One token for each sequence (its last token's KV is computed now); logits [B, vocab]."""
        lengths = [len(s.token_ids) for s in seqs]
        meta = DecodeMetadata.build(
            [s.slots for s in seqs], self.pool.block_size, lengths, self.pool.dtype, self.batch_invariant
        )
        ids = torch.as_tensor([s.token_ids[-1] for s in seqs], dtype=torch.long)
        positions = torch.as_tensor([n - 1 for n in lengths], dtype=torch.long)
        return self.model(ids, positions, self.pool, meta)
