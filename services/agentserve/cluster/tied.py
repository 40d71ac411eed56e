"""`python -m agentserve.cluster.tied PROGRAM ARGS...`: run a program that is not agentserve's (etcd,
HAProxy) as a child of `up --local` that dies with it, as agentserve's services do
(`common/lifetime.py`): the tie to the parent is made here, and survives the exec into PROGRAM."""

from __future__ import annotations

import os
import shutil
import sys

from agentserve.common.lifetime import die_with_parent


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m agentserve.cluster.tied PROGRAM [ARGS...]")
    if shutil.which(argv[0]) is None:
        sys.exit(f"{argv[0]} is not installed (scripts/install.sh installs Debian's etcd-server and haproxy)")
    die_with_parent()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
