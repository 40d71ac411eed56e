"""The power-loss recorder's log: what `powerloss_shim.c` wrote, as a list of `Op`s in call order.

Each record is a fixed header (op, fd, two integers, the lengths of two paths and of the data)
followed by the paths and the data. Paths are absolute; the recorder logs only those under its
root, and `read_log` makes them relative to that root ("." for the root itself).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from pathlib import Path

_HEADER = struct.Struct("<B3xiqqIIQ")


class Kind(enum.IntEnum):
    OPEN = 1  # fd, a = flags, b = bit 0: created by this open, bit 1: a directory
    WRITE = 2  # fd, a = offset, data
    TRUNC = 3  # fd (or path when fd is -1), a = length
    FSYNC = 4  # fd (fsync or fdatasync)
    SYNCALL = 5  # sync or syncfs: every file and directory durable
    RENAME = 6  # path -> path2
    UNLINK = 7
    MKDIR = 8
    RMDIR = 9
    CLOSE = 10
    MARK = 11  # path = the writer's marker text


OPEN_CREATED = 1
OPEN_DIRECTORY = 2


@dataclass(frozen=True)
class Op:
    kind: Kind
    fd: int = -1
    a: int = 0
    b: int = 0
    path: str = ""
    path2: str = ""
    data: bytes = b""


def parse(raw: bytes) -> list[Op]:
    """Every record of a log; ValueError naming the offset if the log ends inside a record."""
    ops: list[Op] = []
    at = 0
    while at < len(raw):
        if at + _HEADER.size > len(raw):
            raise ValueError(f"power-loss log truncated in a record header at byte {at}")
        kind, fd, a, b, len1, len2, dlen = _HEADER.unpack_from(raw, at)
        at += _HEADER.size
        end = at + len1 + len2 + dlen
        if end > len(raw):
            raise ValueError(f"power-loss log truncated in a record body at byte {at}")
        path = raw[at : at + len1].decode()
        path2 = raw[at + len1 : at + len1 + len2].decode()
        ops.append(Op(Kind(kind), fd, a, b, path, path2, raw[at + len1 + len2 : end]))
        at = end
    return ops


def read_log(path: Path, root: Path) -> list[Op]:
    """The log at `path`, its paths made relative to `root` ("." for the root itself)."""
    prefix = str(root)
    return [_relative(op, prefix) for op in parse(path.read_bytes())]


def _relative(op: Op, prefix: str) -> Op:
    if op.kind is Kind.MARK:
        return op
    return Op(op.kind, op.fd, op.a, op.b, _strip(op.path, prefix), _strip(op.path2, prefix), op.data)


def _strip(path: str, prefix: str) -> str:
    if not path:
        return ""
    if path == prefix:
        return "."
    if path.startswith(prefix + "/"):
        return path[len(prefix) + 1 :]
    return "/" + path.lstrip("/")  # outside the root (one side of a rename): kept absolute
