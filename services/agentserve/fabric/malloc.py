"""Keep freed multi-megabyte buffers in the process instead of handing them back to the kernel.

Every KV block or chunk a process reads, sends or receives is a fresh buffer of about a megabyte
(the bytes `os.pread` returns, gRPC's message, the decoded payload). With glibc's defaults such a
buffer is either its own mmap or sits at the top of a heap that is trimmed once it is freed, so
the next one is faulted in again page by page: 256 faults per MB, which on a VM cost more than
copying the bytes (gRPC reception of 1 MB messages takes about two fifths less CPU per MB with the
settings below). Raising the mmap and trim thresholds keeps freed buffers in the heap for the next
one; the price is that each heap may hold up to TRIM_THRESHOLD of freed memory instead of
returning it.

`keep_freed_buffers()` is called by what moves KV bytes (the block store, the kvstore client,
the fabric's sender and receiver); it is process-wide, idempotent, and a no-op where the C
library has no `mallopt` (not glibc).
"""

from __future__ import annotations

import ctypes
import threading

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest; bigger allocations stay mmaps of their own
TRIM_THRESHOLD = 128 << 20  # free bytes a heap may keep at its top before giving them back

_lock = threading.Lock()
_taken: bool | None = None  # None: not tried yet


def keep_freed_buffers() -> bool:
    """Set the thresholds once per process; True if this C library took them."""
    global _taken
    with _lock:
        if _taken is None:
            _taken = _set_thresholds()
        return _taken


def _set_thresholds() -> bool:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
