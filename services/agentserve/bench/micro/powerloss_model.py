"""The power-loss persistence model: what survives a crash after a prefix of a recorded log.

The model LazyFS and ALICE use. A file's data is durable up to its last fsync (or fdatasync);
a directory's entries (creations, renames, unlinks, mkdirs in it) are durable up to the last
fsync of that directory; `sync`/`syncfs` make everything durable. A crash keeps exactly the
durable state:

- `crash()` (mode "lose", LazyFS's crash): every change not made durable is lost; a file whose
  entry is durable but whose data was never synced is empty.
- `crash(rng)` (mode "torn"): as the disk may have written back part of what was pending, for
  each file a random prefix of its changes since its last fsync survives, the last write cut at a
  random byte, and for each directory a random prefix of its entry changes since its last fsync.

The durable state is a tree: a directory is a dict of names, a file its bytes. Only what the
recorder logged is modelled, so the log must start with the root empty (or its contents already
durable and never touched).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from agentserve.bench.micro.powerloss_log import OPEN_CREATED, Kind, Op

Tree = dict[str, "Tree | bytes"]
ROOT = 0


class ReplayError(ValueError):
    """The log names a file or descriptor the model does not know (a call the recorder missed)."""


@dataclass
class Node:
    is_dir: bool
    data: bytearray = field(default_factory=bytearray)  # a file's bytes as the process sees them
    durable: bytes = b""  # a file's bytes as of its last fsync
    # A file's changes since its last fsync: (offset, data) writes and (0, length) truncations.
    pending: list[tuple[int, int, bytes]] = field(default_factory=list)  # (offset, truncate-to or -1, data)
    entries: dict[str, int] = field(default_factory=dict)  # a directory's names as the process sees them
    durable_entries: dict[str, int] = field(default_factory=dict)  # as of its last fsync
    # A directory's entry changes since its last fsync, each group atomic (a rename within it).
    entry_log: list[list[tuple[str, int | None]]] = field(default_factory=list)  # (name, node or None)


class PersistenceModel:
    """Replays ops in order (`apply`); `crash` gives the durable state after the ops applied so far."""

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {ROOT: Node(is_dir=True)}
        self._fds: dict[int, int] = {}

    def apply(self, op: Op) -> None:
        kind = op.kind
        if kind is Kind.OPEN:
            self._open(op)
        elif kind is Kind.WRITE:
            self._write(self._node_of_fd(op.fd), op.a, op.data)
        elif kind is Kind.TRUNC:
            node = self._nodes[self._lookup(op.path)] if op.fd < 0 else self._node_of_fd(op.fd)
            self._truncate(node, op.a)
        elif kind is Kind.FSYNC:
            self._sync(self._node_of_fd(op.fd))
        elif kind is Kind.SYNCALL:
            for node in self._nodes.values():
                self._sync(node)
        elif kind is Kind.RENAME:
            self._rename(op.path, op.path2)
        elif kind in (Kind.UNLINK, Kind.RMDIR):
            self._set_entry(op.path, None)
        elif kind is Kind.MKDIR:
            self._set_entry(op.path, self._new(is_dir=True))
        elif kind is Kind.CLOSE:
            self._fds.pop(op.fd, None)

    def crash(self, rng: random.Random | None = None) -> Tree:
        """The durable tree: mode "lose" without `rng`, mode "torn" with it (see the module doc)."""
        return self._durable_dir(ROOT, rng, {ROOT})

    # -- replay -----------------------------------------------------------------------------------

    def _open(self, op: Op) -> None:
        ino = self._find(op.path)
        if ino is None:
            if not op.b & OPEN_CREATED:
                raise ReplayError(f"open of {op.path!r}, which the log never created")
            ino = self._new(is_dir=False)
            self._set_entry(op.path, ino)
        elif op.a & os.O_TRUNC:
            self._truncate(self._nodes[ino], 0)
        self._fds[op.fd] = ino

    def _write(self, node: Node, offset: int, data: bytes) -> None:
        end = offset + len(data)
        if len(node.data) < offset:
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset:end] = data
        node.pending.append((offset, -1, data))

    def _truncate(self, node: Node, length: int) -> None:
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(bytes(length - len(node.data)))
        node.pending.append((0, length, b""))

    def _sync(self, node: Node) -> None:
        if node.is_dir:
            node.durable_entries = dict(node.entries)
            node.entry_log.clear()
        else:
            node.durable = bytes(node.data)
            node.pending.clear()

    def _rename(self, src: str, dst: str) -> None:
        ino = self._find(src)
        if ino is None:
            raise ReplayError(f"rename of {src!r}, which the log never created")
        if os.path.normpath(src) == os.path.normpath(dst):
            return
        if not src.startswith("/") and not dst.startswith("/") and self._split(src)[0] == self._split(dst)[0]:
            parent, old = self._split(src)
            new = self._split(dst)[1]
            directory = self._nodes[parent]
            del directory.entries[old]
            directory.entries[new] = ino
            directory.entry_log.append([(old, None), (new, ino)])  # one atomic change of one directory
            return
        self._set_entry(src, None)
        self._set_entry(dst, ino)

    def _new(self, is_dir: bool) -> int:
        ino = len(self._nodes)
        self._nodes[ino] = Node(is_dir=is_dir)
        return ino

    def _node_of_fd(self, fd: int) -> Node:
        try:
            return self._nodes[self._fds[fd]]
        except KeyError:
            raise ReplayError(f"fd {fd} was never opened in the log") from None

    def _split(self, path: str) -> tuple[int, str]:
        """(the parent directory's node, the last name) of a path relative to the root."""
        parts = [p for p in os.path.normpath(path).split("/") if p not in ("", ".")]
        if not parts or path.startswith("/"):
            raise ReplayError(f"path {path!r} is the root or outside it")
        parent = ROOT
        for name in parts[:-1]:
            child = self._nodes[parent].entries.get(name)
            if child is None or not self._nodes[child].is_dir:
                raise ReplayError(f"path {path!r}: no directory {name!r}")
            parent = child
        return parent, parts[-1]

    def _find(self, path: str) -> int | None:
        if os.path.normpath(path) == ".":
            return ROOT
        parent, name = self._split(path)
        return self._nodes[parent].entries.get(name)

    def _lookup(self, path: str) -> int:
        ino = self._find(path)
        if ino is None:
            raise ReplayError(f"{path!r} is not in the log's file tree")
        return ino

    def _set_entry(self, path: str, ino: int | None) -> None:
        if path.startswith("/"):  # the other side of a rename across the root: not modelled
            return
        parent, name = self._split(path)
        directory = self._nodes[parent]
        if ino is None:
            directory.entries.pop(name, None)
        else:
            directory.entries[name] = ino
        directory.entry_log.append([(name, ino)])

    # -- crash ------------------------------------------------------------------------------------

    def _durable_dir(self, ino: int, rng: random.Random | None, seen: set[int]) -> Tree:
        node = self._nodes[ino]
        entries = dict(node.durable_entries)
        if rng is not None and node.entry_log:
            for group in node.entry_log[: rng.randint(0, len(node.entry_log))]:
                for name, child in group:
                    if child is None:
                        entries.pop(name, None)
                    else:
                        entries[name] = child
        tree: Tree = {}
        for name, child in sorted(entries.items()):
            if child in seen:
                continue  # the same directory under two names: it is kept once
            if self._nodes[child].is_dir:
                tree[name] = self._durable_dir(child, rng, seen | {child})
            else:
                tree[name] = self._durable_file(self._nodes[child], rng)
        return tree

    def _durable_file(self, node: Node, rng: random.Random | None) -> bytes:
        if rng is None or not node.pending:
            return node.durable
        data = bytearray(node.durable)
        kept = rng.randint(0, len(node.pending))
        for i, (offset, truncate_to, payload) in enumerate(node.pending[: kept + 1]):
            if i == kept:  # the first change not written back whole: a write reaches the disk in part
                if truncate_to >= 0:
                    break
                payload = payload[: rng.randint(0, len(payload))]
            if truncate_to >= 0:
                del data[truncate_to:]
                data.extend(bytes(truncate_to - len(data)))
                continue
            if len(data) < offset:
                data.extend(bytes(offset - len(data)))
            data[offset : offset + len(payload)] = payload
        return bytes(data)


def replay(ops: list[Op], rng: random.Random | None = None) -> Tree:
    """The durable tree after a crash that follows `ops` (mode "lose", or "torn" with `rng`)."""
    model = PersistenceModel()
    for op in ops:
        model.apply(op)
    return model.crash(rng)


def materialize(tree: Tree, dest: Path) -> None:
    """Write `tree` under the existing directory `dest`."""
    for name, child in tree.items():
        path = dest / name
        if isinstance(child, dict):
            path.mkdir()
            materialize(child, path)
        else:
            path.write_bytes(child)
