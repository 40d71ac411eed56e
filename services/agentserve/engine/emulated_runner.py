"""EmulatedRunner: ModelRunner's interface, with each forward pass taking the target's time.

A prefill sleeps `ComputeCost.prefill_s(cached, new) * time_dilation`, a decode step
`decode_step_s(contexts) * time_dilation` (agentserve.costmodel.timing). A prefill with an
external prefix runs layer by layer as the real one does: `load_layer(l)` is called before layer
l's share of the time, and layer l's compute starts when both the previous layer is done and its
KV is in hand, so a streaming loader overlaps with compute exactly as far as it keeps ahead.

Decode steps are paced as an overlap scheduler runs them (vLLM's async scheduling, SGLang's
overlap scheduler): the host prepares step k+1 (schedules, samples, streams step k's tokens) while
the GPU runs step k, so back-to-back steps of the same sequences end one modelled step apart, and
host work shows in the token gaps only where it outlasts the step. Without it every step would also
take the host's own time, which here is shared by every emulated engine of a bench's clusters, so
the decode gaps (ITL) would grow with the turns a policy serves a second rather than follow the
modelled step.

A decode step's time comes from `decode_cost`, the model's `ComputeCost` unless the engine is given
another with the same method (`costmodel.expert_parallel.ExpertParallelDecode`: one rank of an
expert-parallel MoE deployment, its MoE layers as slow as the slowest rank under a replayed routing).

Sampled tokens are a fixed function of the position they take (never an EOS id): logits are 0 at
that token and -inf elsewhere, so greedy and seeded sampling alike pick it, and a request ends by
max_tokens or its stop ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Protocol

import torch

from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.emulated_pool import EmulatedKVPool
from agentserve.engine.runner import ExternalPrefix
from agentserve.engine.sequence import Sequence


class DecodeStepCost(Protocol):
    """Target seconds of one decode step for a batch of these contexts; called once per step, on
    the engine's thread, before the step's sleep."""

    def decode_step_s(self, contexts: Seq[int]) -> float: ...


_MIX = 2654435761  # Knuth's multiplicative hash: neighbouring positions get unrelated tokens


class EmulatedRunner:
    def __init__(
        self,
        model: EmulatedModel,
        pool: EmulatedKVPool,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        decode_cost: DecodeStepCost | None = None,
    ):
        self.model = model
        self.pool = pool
        self.cost = model.cost
        self.decode_cost: DecodeStepCost = decode_cost or model.cost
        self.dilation = model.emulation.time_dilation
        self.layers = model.config.num_hidden_layers
        self.vocab = model.config.vocab_size
        self._avoid = set(model.config.eos_token_id)
        if len(self._avoid) >= self.vocab:
            raise ValueError("every token id is an EOS id: the emulated runner has nothing to emit")
        self.sleep = sleep
        self.clock = clock
        self.busy_s = 0.0  # local seconds of emulated compute so far
        # Local seconds a layer-by-layer forward waited for a layer's KV: the engine thread is held
        # (no other sequence steps) while a streamed prefix arrives more slowly than it computes.
        self.layer_wait_s = 0.0
        self._gpu_free = 0.0  # when the emulated GPU ends the work it was last given (its modelled end)
        self._last_decode: tuple[frozenset[str], float] = (frozenset(), 0.0)  # its sequences, modelled seconds

    def prefill(
        self, seq: Sequence, num_cached: int, external: ExternalPrefix | None = None, external_start: int = 0
    ) -> torch.Tensor:
        """Last position's logits `[vocab]` after the target's prefill time for seq.token_ids[num_cached:]."""
        total = len(seq.token_ids)
        duration = self.cost.prefill_s(num_cached, total - num_cached) * self.dilation
        if external is not None and external.num_blocks > external_start:
            self._layer_by_layer(duration / self.layers, external.load_layer)
        else:
            self._compute(duration)
        return self._logits([total])[0]

    def prefill_staged(
        self, seq: Sequence, resident_slots: list[int], new_slots: list[int], external: ExternalPrefix
    ) -> torch.Tensor:
        """`ModelRunner.prefill_staged`'s timing: layer by layer over a prefix of `external.num_blocks`."""
        num_cached = external.num_tokens(self.pool.block_size)
        total = len(seq.token_ids)
        self._layer_by_layer(
            self.cost.prefill_s(num_cached, total - num_cached) * self.dilation / self.layers, external.load_layer
        )
        return self._logits([total])[0]

    def decode(self, seqs: list[Sequence]) -> torch.Tensor:
        """Logits `[B, vocab]` after the target's decode step for the batch."""
        lengths = [len(s.token_ids) for s in seqs]
        duration = self.decode_cost.decode_step_s(lengths) * self.dilation
        ids = frozenset(s.request_id for s in seqs)
        last_ids, last_duration = self._last_decode
        # The host began this step when the GPU began the last one if it continues those sequences
        # (an overlap scheduler), otherwise (a new batch after idle) only now; the GPU starts it
        # when both it and the host are ready, so a prefill run in between is never overlapped.
        now = self.clock()
        host_ready = now - last_duration if ids & last_ids else now
        self._last_decode = (ids, duration)
        self.busy_s += duration
        self._sleep_until(max(self._gpu_free, host_ready) + duration)
        return self._logits(lengths)

    def token_at(self, position: int) -> int:
        """The token an emulated model emits at `position` (0-based index it will take)."""
        token = (((position * _MIX) & 0xFFFFFFFF) >> 7) % self.vocab
        while token in self._avoid:
            token = (token + 1) % self.vocab
        return token

    def _compute(self, duration: float) -> None:
        self.busy_s += duration
        self._sleep_until(self.clock() + duration)

    def _sleep_until(self, end: float) -> None:
        """Sleep until the modelled `end`; the GPU is free from then, not from when the host wakes
        (a late wake-up is the host's delay, which the next step may overlap)."""
        self._gpu_free = end
        wait = end - self.clock()
        if wait > 0:
            self.sleep(wait)

    def _layer_by_layer(self, per_layer: float, load_layer: Callable[[int], object]) -> None:
        done = self.clock()  # when the previous layer's compute ends
        for layer in range(self.layers):
            load_layer(layer)  # blocks until the layer's KV is in hand (LayerLoadError if it never comes)
            arrived = self.clock()
            self.layer_wait_s += max(0.0, arrived - done)
            done = max(done, arrived) + per_layer
            self.busy_s += per_layer
            wait = done - self.clock()
            if wait > 0:
                self.sleep(wait)
        self._gpu_free = done

    def _logits(self, positions: list[int]) -> torch.Tensor:
        logits = torch.full((len(positions), self.vocab), float("-inf"))
        logits[range(len(positions)), [self.token_at(p) for p in positions]] = 0.0
        return logits
