"""An emulated engine's blocks materialised at a few KB are charged exactly what fully materialised
ones are: the same store hits loaded by path A through the same shaped storage NIC are charged the
target's bytes whether each block is 11 KB on the wire (the default cap) or 770 KB (in full), and a
full block charged by its wire bytes (as a real engine's is) is within 5% of the target's size.

Whether the load *times* agree is a performance figure, so it is printed by
`agentserve bench materialise`, not asserted here (the machine may be shared).

In process: two emulated engines per case (one persists, the other loads), a real kvstore process.
"""

from __future__ import annotations

import asyncio

import pytest

from agentserve.bench.micro.materialise import load_through_the_snic
from tests.support.processes import free_port, start_service

pytestmark = pytest.mark.integration

D = 200.0
BLOCKS = 8
TARGET_BLOCK_BYTES = 61 * 788 * 16  # DeepSeek-V3.2: 61 layers x 788 B per token, 16-token blocks


@pytest.fixture(scope="module")
def kvstore(tmp_path_factory):
    port = free_port()
    args = ["--grpc-port", str(port), "--data-dir", str(tmp_path_factory.mktemp("kv")), "--fsync", "false"]
    service = start_service("kvstore", "agentserve.kvstore", args, port)
    yield service.address
    service.stop()


def test_capped_blocks_are_charged_as_fully_materialised_ones(kvstore):
    def load(cap: int, charge_wire: bool, salt: int):
        return asyncio.run(load_through_the_snic(kvstore, cap, charge_wire, BLOCKS, D, repeats=1, salt=salt))

    capped, full, full_wire = load(8192, False, 0), load(0, False, 1), load(0, True, 2)

    declared = BLOCKS * TARGET_BLOCK_BYTES
    assert capped.charged_bytes == full.charged_bytes == declared  # both charged the target's bytes
    assert capped.wire_bytes == BLOCKS * 11_008  # the cap: header + 8 KiB-ish stand-in per block
    assert full.wire_bytes == full_wire.wire_bytes == full_wire.charged_bytes
    assert abs(full_wire.charged_bytes - declared) / declared < 0.05  # full blocks' real bytes ~ target's
