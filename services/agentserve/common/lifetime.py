"""A service process that dies with the process that started it.

`agentserve up --local` puts `AGENTSERVE_PARENT_PID` in its children's environment; a service's
main() then asks the kernel to SIGTERM it when that parent dies (`PR_SET_PDEATHSIG`), so a parent
SIGKILLed at any phase, warm-up included, leaves no service running and no port bound.

The tie is made here, after exec, not in a `preexec_fn` between fork and exec: the parent is
multi-threaded (gRPC's threads, pytest's), and code run in a forked child of such a process can
deadlock or abort (gRPC's fork handlers aborted a child with SIGABRT before it could exec). Without
a `preexec_fn`, subprocess also takes its vfork fast path. The kernel signals on the death of the
parent *thread* that forked the child, so `up` starts children from its main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "AGENTSERVE_PARENT_PID"
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """If started by `up` (the env var names its pid): SIGTERM this process when the parent dies;
    exit now if it already has (the tie came too late to be signalled)."""
    expected = os.environ.get(PARENT_PID_ENV)
    if not expected or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if str(os.getppid()) != expected:
        sys.exit(f"parent {expected} is gone; not starting")
