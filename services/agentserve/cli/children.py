"""Child processes of `agentserve up --local` that never outlive it.

Each child runs in its own process group (a Ctrl-C typed at the terminal reaches only the parent,
which stops the children in order) and, on Linux, asks the kernel to SIGTERM it when its parent
dies (`PR_SET_PDEATHSIG`): a parent SIGKILLed at any phase, warm-up included, leaves no service
running and no port bound. The signal follows the death of the parent *thread* that started the
child, so children are started from the main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with(parent_pid: int) -> Callable[[], None] | None:
    """The preexec function tying a child to `parent_pid` (None where the kernel cannot)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork: nothing to load after it

    def tie() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the tie was made
            os._exit(1)

    return tie


def spawn(cmd: list[str], log: IO[bytes] | IO[str], env: Mapping[str, str]) -> subprocess.Popen:
    """`cmd` started as a child in its own process group, logging to `log`, dying with us."""
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(env),
        process_group=0,
        preexec_fn=_die_with(os.getpid()),
    )
