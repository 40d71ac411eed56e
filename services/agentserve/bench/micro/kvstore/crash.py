"""Crash trials of the block store: a writer killed with SIGKILL at random points, then checked.

Each trial starts a writer process (from a forkserver) that opens the store on a shared data dir (the index rebuilt
from what earlier trials left), streams durable writes and reports every acknowledged block on a
pipe; the parent kills it after a random number of acknowledgements, reopens the store and checks that

- every block ever acknowledged reads back bit-exact (by BLAKE2 digest),
- every block the store lists, acknowledged or not, reads back whole and intact: nothing partial
  is ever served, and no temp file survives a restart,
- and, every few trials, that one flipped byte in a stored file is detected: the read is a miss,
  the block is removed and counted as corrupt.

Trials alternate fsync-per-block and group commit. `python -m agentserve.bench.micro.kvstore.crash
--trials 1000` runs more than the test does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import random
import shutil
import signal
import struct
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from agentserve.bench.micro.kvstore.blocks import BlockMaker, block_id_for
from agentserve.kvstore.layout import TEMP_SUFFIX, block_path
from agentserve.kvstore.store import KVStore
from agentserve.kvstore.types import Tier

FINGERPRINT = "agentserve.bench.kvstore-crash"
SIZES = (4 << 10, 32 << 10, 256 << 10)  # every byte of these is under a checksum (no layout padding)
_ACK = struct.Struct("<H")


def _open(data_dir: Path, group_commit: bool, dram_budget_bytes: int = 0) -> KVStore:
    """No DRAM tier by default: the checks must read what is on disk."""
    return KVStore.open(
        data_dir, dram_budget_bytes=dram_budget_bytes, ssd_budget_bytes=1 << 40, group_commit=group_commit
    )


def _writer(data_dir: Path, blocks: list[tuple[bytes, bytes]], group_commit: bool, acks: Connection) -> None:
    """The child: write `blocks` durably, one ack per block after its write returned."""
    store = _open(data_dir, group_commit, dram_budget_bytes=1 << 20)
    acks.send_bytes(b"R")
    step = _step(group_commit)
    for start in range(0, len(blocks), step):
        batch = blocks[start : start + step]
        store.put_many(FINGERPRINT, batch)
        # a few bytes: one pipe write, so a kill never leaves half an ack
        acks.send_bytes(b"".join(_ACK.pack(start + i) for i in range(len(batch))))


# Writers are forked from a forkserver, never from the caller: the caller may be a test process
# with gRPC and torch threads, and a fork of a multi-threaded process can inherit a lock another
# thread held, so the child hangs before it opens the store. The forkserver is single-threaded.
# Preloaded there so that each writer starts with the store already imported.
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([__name__])


def _trial(
    data_dir: Path, blocks: list[tuple[bytes, bytes]], group_commit: bool, kill_after: int, delay_s: float
) -> set[int]:
    """Run one writer and SIGKILL it `delay_s` after its `kill_after`-th acknowledgement; the
    acknowledged indexes. Counting acknowledgements, not wall time from the start, places the kill
    inside the stream however fast or loaded this machine is; the short random delay spreads the
    kill over the next write's steps (temp file, data, fsync, rename)."""
    reader, writer_end = _CONTEXT.Pipe(duplex=False)
    proc = _CONTEXT.Process(target=_writer, args=(data_dir, blocks, group_commit, writer_end), daemon=True)
    proc.start()
    writer_end.close()
    raw = b""
    try:
        if not reader.poll(60) or reader.recv_bytes() != b"R":
            raise RuntimeError("crash-trial writer did not open the store")
        while len(raw) // _ACK.size < kill_after:
            if not reader.poll(60):
                raise RuntimeError("crash-trial writer stopped acknowledging")
            raw += reader.recv_bytes()
        time.sleep(delay_s)
        proc.kill()
        proc.join()
        if proc.exitcode not in (-signal.SIGKILL, 0):
            raise RuntimeError(f"crash-trial writer failed before it was killed (exit {proc.exitcode})")
        while True:
            try:
                raw += reader.recv_bytes()
            except EOFError:
                break
    finally:
        reader.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
    return {_ACK.unpack_from(raw, i)[0] for i in range(0, len(raw) - len(raw) % _ACK.size, _ACK.size)}


def _check_listed(store: KVStore, expected: dict[bytes, bytes], ids: list[bytes]) -> int:
    """Every listed id among `ids` must read back whole with its expected digest; returns how many."""
    listed = 0
    for block_id, tier in zip(ids, store.lookup(ids).tiers):
        if tier is Tier.NONE:
            continue
        listed += 1
        data = store.get(block_id, FINGERPRINT)
        if data is None or hashlib.blake2b(data).digest() != expected[block_id]:
            raise AssertionError(f"block {block_id.hex()} is listed but does not read back intact")
    return listed


def _corrupt_one(store: KVStore, data_dir: Path, acked: dict[bytes, bytes], rng: random.Random) -> None:
    victim = rng.choice(sorted(acked))
    path = block_path(data_dir, victim)
    raw = bytearray(path.read_bytes())
    raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    path.write_bytes(raw)
    before = store.stats().corrupt_dropped
    if store.get(victim, FINGERPRINT) is not None:
        raise AssertionError(f"a flipped byte in block {victim.hex()} was served")
    if store.stats().corrupt_dropped != before + 1 or path.exists() or store.lookup([victim]).prefix_blocks:
        raise AssertionError(f"corrupt block {victim.hex()} was not reported and removed")
    del acked[victim]


def _write_seconds(data_dir: Path, makers: list[BlockMaker], blocks_per_trial: int, group_commit: bool) -> float:
    """How long one durable write (a block, or a group commit's batch) takes here, timed in a
    scratch store beside `data_dir`."""
    scratch = data_dir.parent / f".{data_dir.name}-calibrate-{int(group_commit)}"
    store = _open(scratch, group_commit)
    try:
        blocks = [
            (b, makers[i % len(makers)].make(b))
            for i, b in enumerate(block_id_for(("calibrate", i), "crash") for i in range(blocks_per_trial))
        ]
        step = _step(group_commit)
        start = time.perf_counter()
        for i in range(0, len(blocks), step):
            store.put_many(FINGERPRINT, blocks[i : i + step])
        return (time.perf_counter() - start) / -(-len(blocks) // step)
    finally:
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _step(group_commit: bool) -> int:
    return 4 if group_commit else 1  # group commit: batches of 4 share one commit


def run_trials(
    data_dir: Path,
    trials: int = 200,
    seed: int = 0,
    blocks_per_trial: int = 32,
    corrupt_every: int = 10,
) -> dict:
    """Each trial kills its writer after a random number of acknowledgements (at least two writes
    before the end of its stream) plus a random part of one write's measured duration."""
    if blocks_per_trial < 2 * _step(True):
        raise ValueError(f"blocks_per_trial must be at least {2 * _step(True)}")
    rng = random.Random(seed)
    makers = [BlockMaker(FINGERPRINT, size, num_layers=8, seed=seed + i) for i, size in enumerate(SIZES)]
    write_s = {mode: _write_seconds(data_dir, makers, blocks_per_trial, mode) for mode in (False, True)}
    acked: dict[bytes, bytes] = {}  # id -> digest of every acknowledged, not deliberately corrupted block
    written: dict[bytes, bytes] = {}
    killed_mid_stream = corrupted = 0
    start = time.perf_counter()
    for trial in range(trials):
        ids = [block_id_for((seed, trial, i), "crash") for i in range(blocks_per_trial)]
        blocks = [(b, rng.choice(makers).make(b)) for b in ids]
        digests = {b: hashlib.blake2b(d).digest() for b, d in blocks}
        written.update(digests)
        group_commit = trial % 2 == 1
        kill_after = rng.randrange(0, blocks_per_trial - 2 * _step(group_commit) + 1)
        acks = _trial(data_dir, blocks, group_commit, kill_after, rng.uniform(0, write_s[group_commit]))
        killed_mid_stream += len(acks) < len(blocks)
        acked.update((ids[i], digests[ids[i]]) for i in acks)
        store = _open(data_dir, group_commit)
        try:
            if any(p.name.endswith(TEMP_SUFFIX) for p in (data_dir / "blocks").rglob("*")):
                raise AssertionError("a temp file of an interrupted write survived the restart")
            missing = [ids[i] for i in acks if store.lookup([ids[i]]).prefix_blocks == 0]
            if missing:
                raise AssertionError(f"trial {trial}: {len(missing)} acknowledged blocks lost, e.g. {missing[0].hex()}")
            _check_listed(store, written, ids)
            if corrupt_every and trial % corrupt_every == corrupt_every - 1 and acked:
                _corrupt_one(store, data_dir, acked, rng)
                corrupted += 1
        finally:
            store.close()
    store = _open(data_dir, False)
    try:
        lost = [b for b in acked if store.lookup([b]).prefix_blocks == 0]
        if lost:
            raise AssertionError(f"{len(lost)} acknowledged blocks lost after all trials")
        listed = _check_listed(store, written, list(written))
    finally:
        store.close()
    return {
        "trials": trials,
        "killed_mid_stream": killed_mid_stream,
        "acknowledged_blocks": len(acked),
        "blocks_listed_and_verified": listed,
        "corruptions_detected": corrupted,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, help="parent of the trial data dir (default: system temp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvstore-crash-", dir=args.data_dir) as tmp:
        print(json.dumps(run_trials(Path(tmp), trials=args.trials, seed=args.seed)))


if __name__ == "__main__":
    main()
