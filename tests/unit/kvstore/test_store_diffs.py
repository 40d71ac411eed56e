"""The store's diff blocks: accepted only against a stored master, masters kept while mirrored,
corruption and removals handled so that nothing unrestorable is ever served."""

from __future__ import annotations

import pytest
import torch

from agentserve.kv.block_diff import restore_block
from agentserve.kv.block_format import deserialize_blocks
from agentserve.kv.block_header import encode_header, read_header
from agentserve.kv.diff_layout import ROWS, XOR_DEFLATE
from agentserve.kvstore.layout import block_path
from agentserve.kvstore.ssd import BlockRejectedError
from agentserve.kvstore.store import StoreFullError
from agentserve.kvstore.types import Tier
from tests.support.diff_blocks import FP, SHIFT, family
from tests.unit.kvstore.conftest import SIZE as UNIT

pytestmark = pytest.mark.unit


def budget(*blocks: bytes) -> float:
    """An SSD budget in open_store's units (kv_blocks blocks) holding exactly `blocks` (plus half a
    byte, so the float never rounds it down)."""
    return (sum(len(b) for b in blocks) + 0.5) / UNIT


def stored(store, *ids: bytes) -> str:
    return "".join("y" if store.lookup([i]).tiers[0] is not Tier.NONE else "n" for i in ids)


@pytest.mark.parametrize("codec", [ROWS, XOR_DEFLATE])
def test_siblings_are_stored_as_diffs_and_restore_against_their_master(open_store, tmp_path, codec):
    store = open_store(dram_blocks=0)
    fam = family(codec=codec)
    result = store.put_many(FP, [(fam.master_id, fam.master)] + [(s.block_id, s.diff) for s in fam.siblings])
    assert (result.stored, result.bytes_written) == (4, len(fam.master) + sum(len(s.diff) for s in fam.siblings))
    assert block_path(tmp_path, fam.master_id).exists()
    for sibling in fam.siblings:
        assert block_path(tmp_path, sibling.block_id, diff=True).read_bytes() == sibling.diff
        read = store.read(sibling.block_id, FP)
        assert read is not None and bytes(read.data) == sibling.diff
        master = store.get(fam.master_id, FP)
        restored = deserialize_blocks(restore_block(master, read.data, SHIFT))
        assert torch.equal(restored.k[:, 0].contiguous().view(torch.int16), sibling.k.view(torch.int16))
        assert torch.equal(restored.v[:, 0].contiguous().view(torch.int16), sibling.v.view(torch.int16))


def test_a_diff_whose_master_is_not_stored_is_rejected_and_nothing_is_lost(open_store):
    fam, other = family(), family(salt="other")
    store = open_store(ssd_blocks=budget(other.master))  # full: accepting anything would evict
    store.put(other.master_id, other.master, FP)
    sibling = fam.siblings[0]
    with pytest.raises(ValueError, match=f"references master {fam.master_id.hex()}, which is not stored"):
        store.put(sibling.block_id, sibling.diff, FP)
    with pytest.raises(BlockRejectedError, match="block 0 .* rejected: diff block .* not stored"):
        # the master after its diff in one write is still a missing master
        store.put_many(FP, [(sibling.block_id, sibling.diff), (fam.master_id, fam.master)])
    assert stored(store, other.master_id, fam.master_id, sibling.block_id) == "ynn"
    assert store.stats().ssd.evictions == 0


def test_a_diff_against_the_wrong_master_or_with_rows_out_of_range_is_rejected(open_store):
    fam, other = family(), family(salt="other")
    store = open_store()
    store.put(fam.master_id, fam.master, FP)
    sibling = fam.siblings[0]
    header = read_header(sibling.diff)
    doc_rows = [list(r) for r in header.diff.rows]
    doc_rows[1][-1] = 16  # past the block's 16 rows
    fields = {
        "fingerprint": FP,
        "dtype": "bfloat16",
        "kv_dtype": "native",
        "num_layers": header.num_layers,
        "num_blocks": 1,
        "block_size": header.block_size,
        "num_kv_heads": header.num_kv_heads,
        "head_dim": header.head_dim,
        "block_ids": [sibling.block_id.hex()],
        "diff": {"master": fam.master_id.hex(), "position_offset": 1, "rows": doc_rows},
    }
    bad = encode_header(fields, list(header.layers)) + sibling.diff[header.payload_offset :]
    with pytest.raises(ValueError, match=r"diff rows of layer 1 must lie in \[0, 16\)"):
        store.put(sibling.block_id, bad, FP)
    store.put(other.master_id, other.master, FP)
    fields["diff"] = {
        "master": other.master_id.hex(),
        "position_offset": 1,
        "rows": [list(r) for r in header.diff.rows],
    }
    fields["dtype"] = "float16"  # another master's shape: same ids aside, its dtype disagrees
    wrong = encode_header(fields, list(header.layers)) + sibling.diff[header.payload_offset :]
    with pytest.raises(ValueError, match="disagree on dtype: torch.float16 vs torch.bfloat16"):
        store.put(sibling.block_id, wrong, FP)
    assert stored(store, fam.master_id, other.master_id, sibling.block_id) == "yyn"


def test_a_master_is_evicted_only_after_its_mirrors(open_store):
    fam, filler, late = family(offsets=(3, 9)), family(salt="filler"), family(salt="late")
    a1, a2 = fam.siblings
    store = open_store(ssd_blocks=budget(fam.master, a1.diff, a2.diff, filler.master))
    store.put_many(FP, [(fam.master_id, fam.master), (a1.block_id, a1.diff), (a2.block_id, a2.diff)])
    store.put(filler.master_id, filler.master, FP)
    # LRU order: master, a1, a2, filler. The master is passed over while it has mirrors.
    store.put(late.master_id, late.master, FP)
    assert stored(store, fam.master_id, a1.block_id, a2.block_id, filler.master_id, late.master_id) == "ynnny"
    # With its mirrors gone it is an ordinary block again, and the oldest.
    store.put(filler.master_id, filler.master, FP)
    assert stored(store, fam.master_id, filler.master_id, late.master_id) == "nyy"
    assert store.stats().ssd.evictions == 4


def test_deleting_a_master_deletes_its_mirrors(open_store, tmp_path):
    fam = family()
    store = open_store()
    store.put_many(FP, [(fam.master_id, fam.master)] + [(s.block_id, s.diff) for s in fam.siblings])
    assert store.delete([fam.master_id]) == 1
    assert stored(store, fam.master_id, *(s.block_id for s in fam.siblings)) == "nnnn"
    assert not any(block_path(tmp_path, s.block_id, diff=True).exists() for s in fam.siblings)
    assert store.stats().ssd.bytes == 0


def test_a_corrupt_diff_on_disk_is_detected_dropped_and_reported_missing(open_store, tmp_path):
    fam = family()
    store = open_store(dram_blocks=0)
    store.put_many(FP, [(fam.master_id, fam.master)] + [(s.block_id, s.diff) for s in fam.siblings])
    sibling = fam.siblings[1]
    header = read_header(sibling.diff)
    path = block_path(tmp_path, sibling.block_id, diff=True)
    data = bytearray(path.read_bytes())
    data[header.payload_offset + header.layers[2].offset + 1] ^= 0x40
    path.write_bytes(data)
    assert store.read(sibling.block_id, FP) is None  # missing: the caller recomputes the block
    assert store.stats().corrupt_dropped == 1
    assert not path.exists()
    assert stored(store, fam.master_id, fam.siblings[0].block_id, sibling.block_id, fam.siblings[2].block_id) == "yyny"
    assert bytes(store.read(fam.siblings[0].block_id, FP).data) == fam.siblings[0].diff


def test_a_corrupt_master_takes_its_mirrors_with_it(open_store, tmp_path):
    fam = family()
    store = open_store(dram_blocks=0)
    store.put_many(FP, [(fam.master_id, fam.master)] + [(s.block_id, s.diff) for s in fam.siblings])
    path = block_path(tmp_path, fam.master_id)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(data)
    assert store.read(fam.master_id, FP) is None
    assert stored(store, fam.master_id, *(s.block_id for s in fam.siblings)) == "nnnn"
    assert store.stats().ssd.bytes == 0


def test_mirrors_survive_a_restart_and_orphans_are_removed(open_store, tmp_path):
    fam, lone, filler = family(offsets=(5,)), family(salt="lone", offsets=(2,)), family(salt="filler")
    store = open_store()
    store.put_many(FP, [(fam.master_id, fam.master), (fam.siblings[0].block_id, fam.siblings[0].diff)])
    store.put_many(FP, [(lone.master_id, lone.master), (lone.siblings[0].block_id, lone.siblings[0].diff)])
    store.close()
    block_path(tmp_path, lone.master_id).unlink()  # as if a crash kept the master's delete, not the diff's
    store = open_store(ssd_blocks=budget(fam.master, fam.siblings[0].diff, filler.master))
    assert stored(store, lone.siblings[0].block_id) == "n"
    assert not block_path(tmp_path, lone.siblings[0].block_id, diff=True).exists()
    store.put(filler.master_id, filler.master, FP)  # fits: the orphan's bytes are gone
    assert stored(store, fam.master_id, fam.siblings[0].block_id, filler.master_id) == "yyy"
    late = family(salt="late")
    store.pin([filler.master_id], ttl_s=60)
    with pytest.raises(StoreFullError, match="SSD tier full"):  # only the small mirror may go: too little
        store.put(late.master_id, late.master, FP)
    assert stored(store, fam.master_id, fam.siblings[0].block_id, filler.master_id, late.master_id) == "yyyn"
