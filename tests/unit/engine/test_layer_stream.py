"""LayerStream: layer l is handed over once every block's layer l has arrived, whatever the order."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from agentserve.engine.layer_stream import LayerStream
from agentserve.engine.runner import LayerLoadError
from agentserve.kv.block_format import deserialize_blocks

pytestmark = pytest.mark.unit

LAYERS, BLOCKS, SHAPE = 3, 4, (2, 1, 2)


def _kv(layers: int, blocks: int, base: float) -> torch.Tensor:
    return torch.arange(layers * blocks * 4, dtype=torch.float32).view(layers, blocks, *SHAPE) + base


def test_a_layer_is_ready_when_every_block_of_it_arrived():
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    assert not stream.started()
    stream.put(2, range(0, 1), _kv(1, 2, 100), _kv(1, 2, 200))  # blocks 2, 3 of layer 0 first
    assert not stream.started()
    stream.put(0, range(0, 2), _kv(2, 2, 0), _kv(2, 2, 50))  # blocks 0, 1 of layers 0 and 1
    assert stream.started() and not stream.complete
    k, v = stream.layer(0)
    assert torch.equal(k[2:], _kv(1, 2, 100)[0]) and torch.equal(v[:2], _kv(2, 2, 50)[0])


def test_the_forward_waits_only_for_the_layer_it_needs():
    waiting = threading.Event()  # set once the forward waits for a layer that has not arrived

    def wait_a_slice(seconds: float) -> None:
        waiting.set()
        time.sleep(seconds)

    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32, while_waiting=wait_a_slice)
    got: list[int] = []

    def forward() -> None:
        for layer in range(LAYERS):
            stream.layer(layer)
            got.append(layer)

    stream.put(0, range(0, 1), _kv(1, BLOCKS, 0), _kv(1, BLOCKS, 0))
    engine = threading.Thread(target=forward)
    engine.start()
    assert waiting.wait(timeout=30)
    assert got == [0]  # layer 0 ran; layer 1 has not arrived
    stream.put(0, range(1, 3), _kv(2, BLOCKS, 0), _kv(2, BLOCKS, 0))
    engine.join(timeout=5)
    assert got == [0, 1, 2] and stream.complete


def test_a_failed_load_raises_in_the_waiting_forward():
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    stream.put(0, range(0, 1), _kv(1, BLOCKS, 0), _kv(1, BLOCKS, 0))
    stream.fail(RuntimeError("store read failed"))
    assert torch.equal(stream.layer(0)[0], _kv(1, BLOCKS, 0)[0])  # what arrived stays usable
    with pytest.raises(LayerLoadError, match="layer 1 of the cached prefix: RuntimeError\\('store read failed'\\)"):
        stream.layer(1)


def test_a_layer_that_never_comes_times_out():
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32, timeout_s=0.05)
    with pytest.raises(LayerLoadError, match="layer 0 of the cached prefix: not delivered within 0.05s"):
        stream.layer(0)


def test_blocks_that_do_not_fit_are_refused():
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    with pytest.raises(ValueError, match="blocks 3..4 do not fit a stream of 3 layers x 4 blocks"):
        stream.put(3, range(0, 1), _kv(1, 2, 0), _kv(1, 2, 0))


def test_external_prefix_and_block_reserialization():
    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32)
    stream.put(0, range(LAYERS), _kv(LAYERS, BLOCKS, 0), _kv(LAYERS, BLOCKS, 7))
    external = stream.external(num_blocks=10)
    assert (external.num_blocks, external.first_block, external.ready()) == (10, 6, True)
    blocks = deserialize_blocks(stream.serialize_block(2, b"\x01" * 16, "fp"), expected_fingerprint="fp")
    assert torch.equal(blocks.k[:, 0], _kv(LAYERS, BLOCKS, 0)[:, 2])
    assert torch.equal(blocks.v[:, 0], _kv(LAYERS, BLOCKS, 7)[:, 2])


def test_the_engine_thread_serves_commands_while_it_waits_for_a_layer():
    served: list[float] = []
    stream = LayerStream(
        LAYERS, BLOCKS, SHAPE, torch.float32, while_waiting=lambda s: (served.append(s), time.sleep(s))
    )
    loader = threading.Timer(0.05, lambda: stream.put(0, range(0, 1), _kv(1, BLOCKS, 0), _kv(1, BLOCKS, 0)))
    loader.start()
    k, _ = stream.layer(0)
    loader.join()
    assert torch.equal(k, _kv(1, BLOCKS, 0)[0])
    assert len(served) >= 5 and max(served) <= 0.002  # in slices: the layer is looked at every 2 ms


def test_with_a_wake_the_engine_thread_waits_until_a_loader_puts_or_fails():
    woken = threading.Event()
    waits: list[float] = []

    def wait(seconds: float) -> None:  # as AsyncEngine.serve_commands: returns once woken
        waits.append(seconds)
        woken.wait(seconds)
        woken.clear()

    stream = LayerStream(LAYERS, BLOCKS, SHAPE, torch.float32, timeout_s=5.0, while_waiting=wait, wake=woken.set)
    loader = threading.Timer(0.05, lambda: stream.put(0, range(0, 1), _kv(1, BLOCKS, 0), _kv(1, BLOCKS, 0)))
    loader.start()
    k, _ = stream.layer(0)
    loader.join()
    assert torch.equal(k, _kv(1, BLOCKS, 0)[0])
    assert len(waits) == 1 and waits[0] > 4.9  # one wait, ended by the put, not 2 ms slices
    failing = threading.Timer(0.05, lambda: stream.fail(RuntimeError("store down")))
    failing.start()
    with pytest.raises(LayerLoadError, match="store down"):
        stream.layer(1)
    failing.join()
    assert len(waits) == 2
