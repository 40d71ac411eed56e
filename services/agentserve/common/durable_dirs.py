"""Creating a directory so that it survives a power cut, not only a process crash.

`mkdir` changes its parent directory, and that change is durable only once the parent itself is
fsynced: until then a power cut may lose the new directory and everything later made durable
inside it (the files' own fsyncs and their directory's fsync do not cover the parent's entry).
`make_durable_dirs` creates each missing level of a path and fsyncs its parent after each one,
and fsyncs the parent of the last level even when it existed: a process killed between its mkdir
and that fsync leaves a directory that is there but not yet durable.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make `directory`'s entries (creations, renames, unlinks in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_durable_dirs(path: str | os.PathLike) -> None:
    """`mkdir -p path`, each directory it creates (and `path` itself) made durable in its parent."""
    target = Path(os.path.abspath(path))
    missing = []
    level = target
    while not level.is_dir():
        missing.append(level)
        level = level.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)  # another process may make it meanwhile; a file there raises
        fsync_dir(directory.parent)
    if not missing:
        fsync_dir(target.parent)
