"""A listening port another process holds when a service starts: how the service says so.

A launcher that picked its services' ports free (`netutil.free_port`) cannot reserve them: another
process may bind one before the service does, however rare. The service then exits with
`PORT_TAKEN_EXIT` (EX_TEMPFAIL), which no other failure of a service's start uses, so the launcher
(`cluster.local`) knows it may start it again on fresh ports; any other exit is a failure.
"""

from __future__ import annotations

import errno
import socket

PORT_TAKEN_EXIT = 75


def address_in_use(exc: BaseException) -> bool:
    """Whether `exc` is a bind that failed because something else holds the address."""
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE


def probe(host: str, port: int) -> OSError | None:
    """The error binding `host:port` gives now (as a listener would bind it, SO_REUSEADDR set),
    or None when it binds: tells a taken port from another cause of a failed bind whose own
    error does not say (gRPC's). Binds and closes at once; listens on nothing."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:
        return exc
    return None
