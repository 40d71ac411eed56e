"""The blended prefill (CacheBlend-style): a prompt whose shared tokens arrive with reused KV, of
which only a chosen subset is recomputed.

Layer by layer, for a prompt of T tokens:

- layers [0, full_layers) run every token. Layer 0's KV depends only on each token and its
  position, so a re-rotated master is already that KV there (values bit for bit, keys up to the
  rotation's rounding); running it anyway gives every token's hidden state, which the selection
  needs. What a blend hands on for layer 0's shared rows is therefore the re-rotated master's,
  recomputed rows included: a sibling's diff then holds nothing of layer 0 (diff storage compares
  bits with the master shifted), and a recomputed token's fresh layer-0 key, which differs from the
  re-rotation only in its last bits, is not worth storing.
- at layer `full_layers` (the selection layer) every token's q/k/v projection is computed (a
  fraction of the layer's cost, no attention). Each shared token's deviation is the squared
  distance of its fresh K and V from the reused ones: it measures how much the private context
  before the block changed that token. `choose` turns deviations into the set of tokens to carry
  on (private tokens, the prompt's last token, the chosen shared tokens), or None to give up (the
  caller recomputes in full).
- from the selection layer on only the chosen tokens run: their queries attend over the whole
  prompt, their own fresh K/V in their rows and the reused K/V elsewhere.

A prompt may come with a *cached prefix* (`BlendInput.cached` tokens, e.g. an agent's history
held by the prefix cache): those rows' KV is exact already, so they are neither run nor
recomputed, only attended to, as a prefix-cache hit is in a plain prefill. Without it a round's
blend would recompute every agent's whole history, earlier rounds' gathered blocks included.

When the tokens to recompute are known before the forward (`blend_known`: a selection by position
only, each block's anchors, and no deviation estimate wanted), nothing needs the deviation, so no
layer runs the tokens not chosen, layer 0 included: the chosen ones attend there to the reused
K/V, which for layer 0 is the KV itself (up to the rotation's rounding, as above). At the served
bench's token scale every block's budget is its anchors, and running layer 0 and the selection
layer's q/k/v over every token was a third of a blend's time (docs/tokendance.md).

The blend writes in place: `BlendInput.k`/`v` come in holding the reused KV and leave holding the
prompt's KV, each layer's rows overwritten as the layer runs (no per-layer copy of the prompt's
KV), and `sink(layer, k, v)`, when given, sees each layer's as it is final (views of them). The
return value is the last tokens' logits. Linears are row-invariant (`linears.row_invariant_linear`), as the
engine's batch-invariant forward runs them, so a token recomputed here gets the full prefill's bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from agentserve.engine.layer_plan import LayerPlan
from agentserve.engine.linears import row_invariant_linear
from agentserve.engine.model import CausalLM
from agentserve.engine.rope import RotaryEmbedding

# layer, K, V `[T, kv_heads, head_dim]` each: one layer of the prompt's KV, final (views of `BlendInput.k`/`v`).
KVSink = Callable[[int, torch.Tensor, torch.Tensor], None]


@dataclass(frozen=True)
class BlendInput:
    """One prompt's reused KV: `k`/`v` `[layers, T, kv_heads, head_dim]` hold, in the rows where
    `shared` is True, each shared token's reused KV (a master re-rotated to the token's position),
    and the cached prefix's in its rows; other rows are never read. A blend overwrites them with
    the prompt's KV (module docstring)."""

    token_ids: torch.Tensor  # [T] long
    k: torch.Tensor
    v: torch.Tensor
    shared: torch.Tensor  # [T] bool
    cached: int = 0  # rows [0, cached) hold the prompt's cached prefix KV, exact: attended to, never run

    def __post_init__(self) -> None:
        first_shared = int(self.shared.int().argmax()) if bool(self.shared.any()) else self.token_ids.shape[0]
        if not 0 <= self.cached <= first_shared or self.cached >= self.token_ids.shape[0]:
            raise ValueError(
                f"cached must be in [0, {min(first_shared, self.token_ids.shape[0] - 1)}] (before the first "
                f"shared token and the last token), got {self.cached}"
            )


# Shared tokens' deviations `[T]` (0 on private rows), fresh K and V `[T, kv_heads, d]` of the
# selection layer -> which tokens to recompute `[T]` bool, or None to recompute the prompt in full.
Chooser = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor | None]


@torch.inference_mode()
def blend_prefill(
    model: CausalLM,
    blend: BlendInput,
    choose: Chooser,
    sink: KVSink | None = None,
    full_layers: int = 1,
    tail: int = 1,
) -> torch.Tensor | None:
    """The logits of the last `tail` chosen tokens `[tail, vocab]`, or None when `choose` gave up
    (then nothing was written or sunk).

    Every layer's K/V left in `blend` (and sunk) is the reused K/V with the chosen rows replaced by fresh ones, the
    layers run in full included, except layer 0, where shared rows keep the reused K/V (see the
    module docstring): a shared block's sibling is its master moved, plus the rows recomputed in
    layers 1 and up, exactly (what diff storage keeps); a token not chosen keeps its reused KV.
    """
    plans = model.plans
    if not 0 <= full_layers < len(plans):
        raise ValueError(f"full_layers must be in [0, {len(plans)}), got {full_layers}")
    num_tokens, cached = blend.token_ids.shape[0], blend.cached
    x = F.embedding(blend.token_ids[cached:], model.model.embed_tokens.weight)
    cos, sin = model.model.rotary_emb.cos_sin(slice(cached, num_tokens), num_tokens, x.dtype)
    positions = torch.arange(num_tokens)
    run = positions[cached:]  # the tokens this prefill runs: all but the cached prefix
    fresh: list[tuple[torch.Tensor, torch.Tensor]] = []
    for plan in plans[:full_layers]:
        q, k, v = _qkv(x, plan, cos, sin)
        fresh.append((k, v))
        k, v = _after_prefix(blend, plan.index, k, v)
        x = _finish_layer(x, plan, _attend(q, k, v, _visible(run, positions, x.dtype)))
    plan = plans[full_layers]
    q, k, v = _qkv(x, plan, cos, sin)
    fresh.append((k, v))
    layer_k, layer_v = blend.k[plan.index, cached:], blend.v[plan.index, cached:]
    deviation = torch.zeros(num_tokens)
    deviation[cached:] = ((k - layer_k).square().sum((1, 2)) + (v - layer_v).square().sum((1, 2))).float()
    k, v = _after_prefix(blend, plan.index, k, v)
    chosen = choose(deviation.masked_fill(~blend.shared, 0.0), k, v)
    if chosen is None:
        return None
    chosen[:cached] = False
    rows = chosen.nonzero().flatten()
    local = rows - cached  # the chosen tokens' rows among those run
    for layer, (k_fresh, v_fresh) in enumerate(fresh):
        k, v = _write(blend, layer, rows, k_fresh[local], v_fresh[local], sink)
    x, q, cos, sin = x[local], q[local], cos[local], sin[local]
    visible = _visible(rows, positions, x.dtype)
    x = _finish_layer(x, plan, _attend(q, k, v, visible))
    return _chosen_layers(model, blend, rows, x, cos, sin, sink, full_layers + 1, tail, visible)


@torch.inference_mode()
def blend_known(
    model: CausalLM, blend: BlendInput, chosen: torch.Tensor, sink: KVSink | None = None, tail: int = 1
) -> torch.Tensor:
    """The logits of the last `tail` chosen tokens `[tail, vocab]`, every layer run over the
    `chosen` tokens `[T]` bool alone (module docstring), which must include every private token
    after the cached prefix and the last `tail` tokens. The K/V left (and sunk) is `blend_prefill`'s rule:
    the reused K/V with the chosen rows fresh, except layer 0's shared rows, which stay reused."""
    num_tokens, cached = blend.token_ids.shape[0], blend.cached
    if chosen.shape != (num_tokens,) or chosen.dtype != torch.bool:
        raise ValueError(f"chosen must be a [{num_tokens}] bool tensor, got {tuple(chosen.shape)} {chosen.dtype}")
    if not bool(chosen[num_tokens - tail :].all()) or bool((~chosen[cached:] & ~blend.shared[cached:]).any()):
        raise ValueError("chosen must include every private token after the cached prefix and the last tail tokens")
    rows = chosen[cached:].nonzero().flatten() + cached
    x = F.embedding(blend.token_ids[rows], model.model.embed_tokens.weight)
    cos, sin = model.model.rotary_emb.cos_sin(rows, num_tokens, x.dtype)
    return _chosen_layers(model, blend, rows, x, cos, sin, sink, 0, tail)


@torch.inference_mode()
def blend_known_group(
    model: CausalLM, blends: list[BlendInput], chosen: list[torch.Tensor], tail: int = 1
) -> list[torch.Tensor]:
    """`blend_known` for several prompts at once (a round's compatible requests, TokenDance's
    collective recompute): each layer runs every prompt's chosen tokens as one batch of rows (the
    norms, q/k/v, o_proj and MLP over all of them in one product each; attention per prompt, over
    its own KV), and the LM head over every prompt's last `tail` rows in one product. Linears are
    row-invariant, so each prompt's KV and logits are `blend_known`'s bit for bit. Returns each
    prompt's logits `[tail, vocab]`, in order."""
    if len(blends) != len(chosen):
        raise ValueError(f"one chosen set per prompt: {len(chosen)} for {len(blends)} prompts")
    rows, xs, coss, sins, visibles = [], [], [], [], []
    for blend, picked in zip(blends, chosen):
        num_tokens, cached = blend.token_ids.shape[0], blend.cached
        if picked.shape != (num_tokens,) or picked.dtype != torch.bool:
            raise ValueError(f"chosen must be a [{num_tokens}] bool tensor, got {tuple(picked.shape)} {picked.dtype}")
        if not bool(picked[num_tokens - tail :].all()) or bool((~picked[cached:] & ~blend.shared[cached:]).any()):
            raise ValueError("chosen must include every private token after the cached prefix and the last tail tokens")
        r = picked[cached:].nonzero().flatten() + cached
        rows.append(r)
        xs.append(F.embedding(blend.token_ids[r], model.model.embed_tokens.weight))
        cos, sin = model.model.rotary_emb.cos_sin(r, num_tokens, xs[-1].dtype)
        coss.append(cos)
        sins.append(sin)
        visibles.append(_visible(r, torch.arange(num_tokens), xs[-1].dtype))
    counts = [r.shape[0] for r in rows]
    x, cos, sin = torch.cat(xs), torch.cat(coss), torch.cat(sins)
    for plan in model.plans:
        q, k_new, v_new = _qkv(x, plan, cos, sin)
        attended = []
        for blend, r, q_i, k_i, v_i, visible in zip(
            blends, rows, q.split(counts), k_new.split(counts), v_new.split(counts), visibles
        ):
            k, v = _write(blend, plan.index, r, k_i, v_i, None)
            attended.append(_attend(q_i, k, v, visible))
        x = _finish_layer(x, plan, torch.cat(attended))
    ends = torch.as_tensor(counts).cumsum(0)
    last = torch.cat([torch.arange(int(end) - tail, int(end)) for end in ends])
    return list(model.logits(x[last]).split(tail))


def _chosen_layers(  # noqa: PLR0913 - the layer loop's tensors and bounds, as each layer uses them
    model: CausalLM,
    blend: BlendInput,
    rows: torch.Tensor,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    sink: KVSink | None,
    first: int,
    tail: int,
    visible: torch.Tensor | None = None,
) -> torch.Tensor:
    """Layers [first, ...) over the chosen tokens alone (`rows` of the prompt, `x` their hidden
    states): each layer's fresh K/V replace the reused in their rows; the last `tail` rows' logits.
    The rows' attention mask (`_visible`) is the same in every layer: made once."""
    if visible is None:
        visible = _visible(rows, torch.arange(blend.token_ids.shape[0]), x.dtype)
    for plan in model.plans[first:]:
        q, k_new, v_new = _qkv(x, plan, cos, sin)
        k, v = _write(blend, plan.index, rows, k_new, v_new, sink)
        x = _finish_layer(x, plan, _attend(q, k, v, visible))
    return model.logits(x[-tail:])


def _write(
    blend: BlendInput, layer: int, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sink: KVSink | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write the layer's fresh K/V (`k`/`v`, one per row of `rows`) into `blend`, sink the layer,
    and return the K/V that attention reads: the reused with `rows` fresh. Layer 0's shared rows
    keep the reused K/V in `blend` (module docstring), so attention reads a copy there."""
    layer_k, layer_v = blend.k[layer], blend.v[layer]
    if layer == 0:
        read = layer_k.index_copy(0, rows, k), layer_v.index_copy(0, rows, v)
        own = ~blend.shared[rows]
        rows, k, v = rows[own], k[own], v[own]
    layer_k.index_copy_(0, rows, k)
    layer_v.index_copy_(0, rows, v)
    if sink is not None:
        sink(layer, layer_k, layer_v)
    return read if layer == 0 else (layer_k, layer_v)


def _after_prefix(blend: BlendInput, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole prompt's K/V of a layer whose every token after the cached prefix ran: `k`/`v`."""
    if not blend.cached:
        return k, v
    return torch.cat((blend.k[layer, : blend.cached], k)), torch.cat((blend.v[layer, : blend.cached], v))


def _qkv(
    x: torch.Tensor, p: LayerPlan, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q `[n, heads, d]` and k, v `[n, kv_heads, d]`, q and k rotated: `layer_plan.run_layer`'s arithmetic."""
    n, heads, kv_heads, d = x.shape[0], p.heads, p.kv_heads, p.head_dim
    qkv = row_invariant_linear(p.input_norm(x), *p.qkv)
    qk = RotaryEmbedding.rotate(qkv[:, : (heads + kv_heads) * d].view(n, heads + kv_heads, d), cos, sin)
    return qk[:, :heads], qk[:, heads:], qkv[:, (heads + kv_heads) * d :].view(n, kv_heads, d)


def _visible(query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """The attention mask of queries at `query_positions` over keys at `key_positions`: additive,
    0 where a key is at or before the query's position, -inf elsewhere (what the kernel turns a
    bool mask into on every call: the same bits, made once for a prompt's layers). None when every
    token is a query: the flash kernel's own causal mask."""
    if query_positions.shape == key_positions.shape:
        return None
    hidden = key_positions[None, :] > query_positions[:, None]
    return torch.zeros(hidden.shape, dtype=dtype).masked_fill_(hidden, float("-inf"))


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor | None) -> torch.Tensor:
    """Each query over the keys `visible` allows (`_visible`; None: causal over every token); `[n, heads, d]` out."""
    groups = q.shape[1] // k.shape[1]
    queries, keys, values = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    if visible is None:
        out = F.scaled_dot_product_attention(queries, keys, values, is_causal=True, enable_gqa=groups > 1)
    else:
        out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=visible, enable_gqa=groups > 1)
    return out[0].transpose(0, 1)


def _finish_layer(x: torch.Tensor, p: LayerPlan, attended: torch.Tensor) -> torch.Tensor:
    """The rest of `layer_plan.run_layer` after attention: o_proj, residual, MLP, residual."""
    n = x.shape[0]
    x = x + row_invariant_linear(attended.reshape(n, p.heads * p.head_dim), *p.o_proj)
    return x + p.ffn(p.post_norm(x), True)
