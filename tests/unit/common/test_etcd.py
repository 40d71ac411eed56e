"""The etcd client's pure parts: key ranges and the gateway's JSON (the calls: tests/integration)."""

from __future__ import annotations

import pytest

from agentserve.common.etcd import KeyValue, TxnResult, prefix_end, put_op, version_is
from agentserve.scheduler.shared_state import Keys

pytestmark = pytest.mark.unit


def test_a_prefix_range_ends_past_every_key_under_it() -> None:
    assert prefix_end(b"/agentserve/") == b"/agentserve0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\0"  # every key


def test_gateway_json_round_trips_keys_values_and_64_bit_numbers() -> None:
    assert put_op(b"k", b"\x00v", lease=7587899423489039365) == {
        "request_put": {"key": "aw==", "value": "AHY=", "lease": "7587899423489039365"}
    }
    assert version_is(b"k", 0)["version"] == "0"
    kv = KeyValue.of({"key": "aw==", "create_revision": "2", "mod_revision": "5", "version": "3"})
    assert kv == KeyValue(b"k", b"", 2, 5, 3, 0)  # fields at their default are left out of replies
    txn = TxnResult(True, 9, [{"response_put": {}}, {"response_range": {"kvs": [{"key": "aw==", "value": "dg=="}]}}])
    assert txn.ranges(1)[0].value == b"v" and txn.ranges(0) == []


def test_owners_and_session_ids_are_one_path_segment_each() -> None:
    keys = Keys("/agentserve/")
    assert keys.session("acme/eu", "a/b") == b"/agentserve/sessions/acme%2Feu/a%2Fb"
    assert keys.home("", "s") == b"/agentserve/homes//s"  # no keys: the empty owner
    assert keys.session("%", "s") == b"/agentserve/sessions/%25/s"
