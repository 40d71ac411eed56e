"""The SSD tier's files: where a block lives, what the start-up scan finds, who owns a data dir.

`data_dir/blocks/<first 2 hex of id>/<id hex>.kv`, one serialized block per file; the two-hex
fan-out keeps directories small enough for fast lookups on any filesystem. A diff block (a
shared block's sibling stored against its master, `kv.block_diff`) ends in `.kvd` instead, so the
start-up scan finds the diffs (and reads only their small headers to learn their masters). A write goes to a
`.tmp` file in the block's directory first, so an interrupted write leaves only temp files.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from agentserve.kv.block_hash import check_block_id

log = logging.getLogger(__name__)

BLOCK_SUFFIX = ".kv"
DIFF_SUFFIX = ".kvd"
TEMP_SUFFIX = ".tmp"


def block_path(data_dir: str | os.PathLike, block_id: bytes, diff: bool = False) -> Path:
    """Where the store keeps a block's file (for tools and tests that work on the files)."""
    name = bytes(block_id).hex()
    return Path(data_dir) / "blocks" / name[:2] / (name + (DIFF_SUFFIX if diff else BLOCK_SUFFIX))


@dataclass
class Scan:
    blocks: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # id -> (size, mtime ns)
    shards: set[str] = field(default_factory=set)
    diffs: set[bytes] = field(default_factory=set)  # which of `blocks` are diff blocks
    temps_removed: int = 0


def scan_blocks(root: Path) -> Scan:
    """Every block file under `root` (the `blocks` dir); temp files of interrupted writes are removed."""
    found = Scan()
    for shard in root.iterdir():
        if not shard.is_dir():
            continue
        found.shards.add(shard.name)
        for entry in os.scandir(shard):
            if entry.name.endswith(TEMP_SUFFIX):
                os.unlink(entry.path)
                found.temps_removed += 1
                continue
            parsed = _parse_name(entry.name)
            if parsed is None or not entry.is_file():
                log.warning("ignoring unexpected file %s", entry.path)
                continue
            block_id, is_diff = parsed
            st = entry.stat()
            found.blocks[block_id] = (st.st_size, st.st_mtime_ns)
            if is_diff:
                found.diffs.add(block_id)
    return found


def lock_dir(data_dir: Path) -> IO:
    """Hold `data_dir` exclusively for this process (released on close or exit, even SIGKILL)."""
    lock_file = open(data_dir / "LOCK", "a")  # noqa: SIM115 - held open for the store's lifetime
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.close()
        raise RuntimeError(f"data dir {data_dir} is in use by another block store") from None
    return lock_file


def _parse_name(name: str) -> tuple[bytes, bool] | None:
    """(block id, whether a diff block) of a block file's name; None for any other name."""
    for suffix in (BLOCK_SUFFIX, DIFF_SUFFIX):
        if name.endswith(suffix):
            try:
                block_id = bytes.fromhex(name[: -len(suffix)])
                check_block_id(block_id)
            except ValueError:
                return None
            return block_id, suffix == DIFF_SUFFIX
    return None
