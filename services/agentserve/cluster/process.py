"""Child processes of `agentserve up --local` that never outlive it.

Each child runs in its own process group (a Ctrl-C typed at the terminal reaches only the parent,
which stops the children in order) and carries our pid in `AGENTSERVE_PARENT_PID`: its main() asks
the kernel to SIGTERM it when we die (`agentserve.common.lifetime`), so a parent SIGKILLed at any
phase, warm-up included, leaves no service running and no port bound.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from typing import IO

from agentserve.common.lifetime import PARENT_PID_ENV


def spawn(cmd: list[str], log: IO[bytes] | IO[str], env: Mapping[str, str]) -> subprocess.Popen:
    """`cmd` started as a child in its own process group, logging to `log`, dying with us."""
    # No preexec_fn: code between fork and exec in this multi-threaded process is unsafe (see
    # agentserve.common.lifetime); the child ties itself to us after exec instead.
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**env, PARENT_PID_ENV: str(os.getpid())},
        process_group=0,
    )
