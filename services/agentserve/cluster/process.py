"""A local cluster's child processes, which never outlive the process that started them.

Each child runs in its own process group (a Ctrl-C typed at the terminal reaches only the parent,
which stops the children in order) and carries our pid in `AGENTSERVE_PARENT_PID`: its main() asks
the kernel to SIGTERM it when we die (`agentserve.common.lifetime`), so a parent SIGKILLed at any
phase, warm-up included, leaves no service running and no port bound.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from agentserve.cluster.restarts import RestartState
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.lifetime import PARENT_PID_ENV

LOG_TAIL_CHARS = 4000


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


@dataclass
class Proc:
    name: str
    grpc_port: int
    popen: subprocess.Popen
    cmd: list[str] = field(default_factory=list)
    tls: InternalTLS | None = None  # what probing `grpc_port` presents: it is on the internal plane
    restarts: RestartState = field(default_factory=RestartState)
    restart_at: float | None = None  # when a dead one is due to start again
    log: Path | None = None  # where its output goes: the tail of it explains a failed start

    def log_tail(self, max_chars: int = LOG_TAIL_CHARS) -> str:
        """The end of its log (what a failed start printed last); "" without one."""
        if self.log is None:
            return ""
        try:
            with self.log.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - max_chars))
                return f.read().decode(errors="replace")
        except OSError:
            return ""
