"""The KV ledger's etcd value: what a taking-over scheduler reads back is what the last turn wrote."""

from __future__ import annotations

import pytest

from agentserve.contracts.context import ContextLayout, Piece
from agentserve.scheduler.kv_ledger import KVLedger

pytestmark = pytest.mark.unit


def test_a_ledger_reads_back_exactly_with_its_reused_layout() -> None:
    layout = ContextLayout(40, (Piece(0, 16, b"\x01" * 16), Piece(16, 40, b"\x02" * 16, b"\x03" * 16)), b"\x04" * 16)
    ledger = KVLedger("decode-10.0.0.7:50054", layout)
    assert KVLedger.decode(ledger.encode()) == ledger
    assert KVLedger.decode(ledger.encode()).context.pieces[0].master_id is None


def test_a_ledger_of_exact_kv_has_no_layout() -> None:
    assert KVLedger.decode(KVLedger("d0").encode()) == KVLedger("d0", None)
    assert KVLedger.decode(KVLedger().encode()) == KVLedger("", None)
