"""LayerStream: a cached prefix arriving layer by layer, between its loaders and the engine thread.

Loaders (asyncio tasks reading the store by layer, or a path-B relay's layer-major runs) `put`
layers of blocks as they arrive, in any block order; the engine thread's forward asks for one
layer just before running it (`ExternalPrefix.load_layer`) and waits only for that layer: layer
l is ready once every block's layer l is in hand. A failed or short load `fail`s the stream, and
the waiting forward raises `LayerLoadError` (the engine recomputes instead).

The buffers are the prefill engine's host-side copy of the loaded prefix (DualPath's DRAM buffer):
the engine stages one layer of it at a time, and a handoff re-sends blocks from it
(`serialize_block`), since the loaded blocks never enter the engine's pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

from agentserve.engine.runner import ExternalPrefix, LayerLoadError
from agentserve.kv.block_format import serialize_blocks

LAYER_WAIT_TIMEOUT_S = 60.0
WAIT_SLICE_S = 0.002  # with `while_waiting` and no `wake`, how often the wait looks at the layer again


class LayerStream:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_shape: tuple[int, int, int],
        dtype: torch.dtype,
        timeout_s: float = LAYER_WAIT_TIMEOUT_S,
        while_waiting: Callable[[float], None] | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """`block_shape`: (block_size, kv_heads, head_dim). `while_waiting(seconds)`, if given, is
        what the engine thread does while a layer it needs has not arrived (instead of blocking):
        `AsyncEngine.serve_commands`, so other turns' KV imports and exports are not held up. With
        `wake` (`AsyncEngine.wake`, called from the loaders on every put and on a failure), it waits
        until woken rather than looking again every WAIT_SLICE_S: a wait for a prefix of 61 layers
        streaming for seconds is then ~61 wake-ups, not one every 2 ms."""
        if num_layers <= 0 or num_blocks <= 0:
            raise ValueError(f"a layer stream needs layers and blocks, got {num_layers} and {num_blocks}")
        shape = (num_layers, num_blocks, *block_shape)
        self.k = torch.empty(shape, dtype=dtype)
        self.v = torch.empty(shape, dtype=dtype)
        self.num_layers, self.num_blocks, self.dtype = num_layers, num_blocks, dtype
        self.timeout_s = timeout_s
        self.while_waiting = while_waiting
        self.wake = wake
        self._have = torch.zeros((num_layers, num_blocks), dtype=torch.bool)
        self._ready = [False] * num_layers
        self._error: BaseException | None = None
        self._changed = threading.Condition()

    # ---- loaders (any thread) --------------------------------------------------------------

    def put(self, first_block: int, layers: range, k: torch.Tensor, v: torch.Tensor) -> None:
        """Blocks [first_block, first_block + k.shape[1]) of `layers`; k, v `[len(layers), blocks, ...]`."""
        blocks = slice(first_block, first_block + k.shape[1])
        if not 0 <= first_block <= blocks.stop <= self.num_blocks or k.shape[0] != len(layers):
            raise ValueError(
                f"layers {layers.start}..{layers.stop - 1} of blocks {blocks.start}..{blocks.stop - 1} "
                f"do not fit a stream of {self.num_layers} layers x {self.num_blocks} blocks"
            )
        self.k[layers.start : layers.stop, blocks] = k
        self.v[layers.start : layers.stop, blocks] = v
        with self._changed:
            self._have[layers.start : layers.stop, blocks] = True
            for layer in layers:
                self._ready[layer] = bool(self._have[layer].all())
            self._changed.notify_all()
        if self.wake is not None:
            self.wake()

    def fail(self, error: BaseException) -> None:
        """No more layers will come: every wait for a missing layer raises from now on."""
        with self._changed:
            if self._error is None:
                self._error = error
            self._changed.notify_all()
        if self.wake is not None:
            self.wake()

    # ---- the engine thread -------------------------------------------------------------------

    def started(self) -> bool:
        """Layer 0 is in hand (or the stream failed): a forward can start without waiting."""
        return self._ready[0] or self._error is not None

    @property
    def complete(self) -> bool:
        return all(self._ready)

    def arrived(self) -> bool:
        """Every layer is in hand (or the stream failed): a forward over it never waits."""
        return self.complete or self._error is not None

    def layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `layer` of every block, `[num_blocks, block_size, heads, d]` each, once it has arrived."""
        deadline = time.monotonic() + self.timeout_s
        with self._changed:
            while not self._ready[layer] and self._error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if self.while_waiting is None:
                    self._changed.wait(remaining)
                    continue
                self._changed.release()  # loaders must not wait for what the engine thread runs
                try:
                    self.while_waiting(remaining if self.wake is not None else min(remaining, WAIT_SLICE_S))
                finally:
                    self._changed.acquire()
            if not self._ready[layer]:
                reason = f"not delivered within {self.timeout_s:g}s" if self._error is None else repr(self._error)
                raise LayerLoadError(f"layer {layer} of the cached prefix: {reason}")
        return self.k[layer], self.v[layer]

    def external(self, num_blocks: int, tail_tokens: int = 0) -> ExternalPrefix:
        """The prefix this stream delivers: the sequence's blocks [num_blocks - self.num_blocks,
        num_blocks), the last of them a tail of `tail_tokens` tokens if that is not 0."""
        return ExternalPrefix(
            num_blocks,
            self.layer,
            first_block=num_blocks - self.num_blocks,
            ready=self.started,
            arrived=self.arrived,
            tail_tokens=tail_tokens,
        )

    def serialize_block(self, index: int, block_id: bytes, fingerprint: str, kv_dtype: str = "native") -> bytearray:
        """Block `index` (all layers, which must have arrived) in the block format, its payload
        `kv_dtype` (an FP8 engine's: the values its staged prefill attended over, `kv.fp8`)."""
        if not self.complete:
            raise LayerLoadError("the cached prefix did not arrive whole")
        window = slice(index, index + 1)
        return serialize_blocks(
            self.k[:, window], self.v[:, window], block_ids=[block_id], fingerprint=fingerprint, kv_dtype=kv_dtype
        )
