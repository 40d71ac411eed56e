"""ModelRunner: turns scheduled sequences into one forward pass over the paged KV pool.

The runner owns no scheduling state; the engine decides what runs and hands it slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentserve.engine.attention import DecodeMetadata, PrefillMetadata
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.model import CausalLM
from agentserve.engine.sequence import Sequence

# layer -> (k, v), each `[num_blocks, block_size, kv_heads, head_dim]`.
LayerKVSource = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class ExternalPrefix:
    """KV of a sequence's first `num_blocks` full blocks that lives outside this engine's pool.

    `load_layer(l)` is called just before layer l runs (layerwise loading): only one layer of the
    external KV needs to be in hand at a time, and a streaming loader can still be receiving later
    layers while earlier ones compute.
    """

    num_blocks: int
    load_layer: LayerKVSource


class ModelRunner:
    def __init__(self, model: CausalLM, pool: KVPool):
        model_dtype = model.lm_head.weight.dtype
        if pool.dtype != model_dtype:
            # Attention copies each layer's new K/V into the pool as they are, without a cast.
            raise ValueError(f"KV pool dtype {pool.dtype} differs from the model's {model_dtype}")
        self.model = model
        self.pool = pool

    def prefill(
        self, seq: Sequence, num_cached: int, external: ExternalPrefix | None = None, external_start: int = 0
    ) -> torch.Tensor:
        """Compute KV for seq.token_ids[num_cached:] and return the last position's logits [vocab].

        With `external`, blocks [external_start, external.num_blocks) are filled layer by layer from
        it before each layer runs; they must lie inside the first `num_cached` tokens.
        """
        total = len(seq.token_ids)
        bs = self.pool.block_size
        meta = PrefillMetadata.build(seq.slots, bs, num_cached, total - num_cached)
        ids = torch.as_tensor(seq.token_ids[num_cached:], dtype=torch.long)
        hook = None
        if external is not None and external.num_blocks > external_start:
            hook = self._layer_loader(external, seq.slots[external_start : external.num_blocks], external_start)
        positions = slice(num_cached, total)  # a range: the rotary tables are viewed, not indexed
        logits = self.model(ids, positions, self.pool, meta, logits_rows=slice(-1, None), before_layer=hook)
        return logits[0]

    def _layer_loader(self, external: ExternalPrefix, slots: list[int], start: int):
        """The before-layer hook writing external blocks [start, num_blocks) of one layer into `slots`."""

        def load(layer: int) -> None:
            k, v = external.load_layer(layer)
            k, v = k[start : external.num_blocks], v[start : external.num_blocks]
            self.pool.write_blocks(slots, k[None], v[None], range(layer, layer + 1))

        return load

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """One token for each sequence (its last token's KV is computed now); logits [B, vocab]."""
        lengths = [len(s.token_ids) for s in seqs]
        meta = DecodeMetadata.build([s.slots for s in seqs], self.pool.block_size, lengths, self.pool.dtype)
        ids = torch.as_tensor([s.token_ids[-1] for s in seqs], dtype=torch.long)
        positions = torch.as_tensor([n - 1 for n in lengths], dtype=torch.long)
        return self.model(ids, positions, self.pool, meta)
