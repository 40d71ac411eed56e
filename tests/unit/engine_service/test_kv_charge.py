"""KVCharge: real engines are charged their wire bytes; emulated ones the target's bytes for the KV
a buffer carries (whole blocks, single layers, or chunks of a relayed run), headers free."""

from __future__ import annotations

import pytest
import torch

from agentserve.engine_service.kv_charge import KVCharge
from agentserve.fabric.chunks import split_run
from agentserve.kv.block_format import serialize_blocks

pytestmark = pytest.mark.unit

LAYERS, DECLARED = 61, 61 * 788 * 16  # DeepSeek-V3.2, 16-token blocks


def run(blocks: int) -> bytearray:
    kv = torch.zeros((LAYERS, blocks, 16, 1, 2), dtype=torch.float16)
    return serialize_blocks(kv, kv, block_ids=[bytes([i]) * 16 for i in range(blocks)], fingerprint="emu-x")


def test_real_compute_is_charged_the_wire_bytes():
    charge = KVCharge(wire_block_bytes=11_008, num_layers=LAYERS)
    pacer = charge.run_pacer()
    assert (charge.per_block, charge.blocks(5000, 3), charge.blocks(100, 1, layers=1)) == (11_008, 5000, 100)
    assert [pacer(b"head", 10), pacer(b"", 7)] == [14, 7]


def test_emulated_compute_is_charged_the_targets_bytes_for_the_kv_carried():
    charge = KVCharge(wire_block_bytes=11_008, num_layers=LAYERS, declared_block_bytes=DECLARED)
    assert charge.per_block == charge.blocks(11_008) == 769_088
    assert charge.blocks(3 * 11_008, 3) == 3 * 769_088
    assert charge.blocks(3_000, 1, layers=1) == 769_088 // 61 == 12_608  # one layer, its header free
    # A relayed run of 16 blocks in 4 KiB chunks: the chunks add up to 16 blocks' target bytes.
    relayed = run(16)
    pacer = charge.run_pacer()
    chunks = split_run(relayed, max_chunk_bytes=4096)
    assert len(chunks) > 10
    total = sum(pacer(chunk.header, len(chunk.data)) for chunk in chunks)
    assert abs(total - 16 * 769_088) <= len(chunks)  # each chunk rounds to a whole byte
    with pytest.raises(ValueError, match="must split evenly over 61 layers"):
        KVCharge(1, LAYERS, declared_block_bytes=1000)
