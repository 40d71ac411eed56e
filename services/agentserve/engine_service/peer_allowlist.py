"""PeerAllowList: an engine dials only the peers the scheduler registered.

A prefill request names the decode engine to hand KV to (`decode_address`) and the one relaying
path-B loads (`relay_address`). Whoever can send a prefill could otherwise make the engine open a
connection to any address of their choice: mutual TLS (internal_tls.py) stops the KV at the
handshake, but the connection is still made. So an address is dialed only if it is a decode engine
the scheduler has registered and sees alive: the scheduler sends that set with every reply to the
engine's registration and heartbeats (`update`), and an address not in it is refused with
PermissionDenied naming the field, before the request does any work.

A decode engine that registered after the last heartbeat is legitimately unknown for up to a
heartbeat interval; on a miss the list asks the scheduler once more (`refresh`, one request for any
number of concurrent misses) before refusing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from agentserve.common.errors import PermissionDenied

log = logging.getLogger(__name__)

Refresh = Callable[[], Awaitable[Iterable[str]]]


class PeerAllowList:
    def __init__(self, refresh: Refresh | None = None) -> None:
        """`refresh()`: the registered peers, asked of the scheduler now (None: only `update` fills it)."""
        self._refresh = refresh
        self._peers: frozenset[str] = frozenset()
        self._refreshing: asyncio.Task[None] | None = None

    @property
    def peers(self) -> frozenset[str]:
        return self._peers

    def update(self, peers: Iterable[str]) -> None:
        """Replace the set with the scheduler's current one (peers it dropped leave it)."""
        self._peers = frozenset(peers)

    async def check(self, field: str, address: str) -> None:
        """Return if `address` is a registered peer, asking the scheduler once on a miss; else
        PermissionDenied naming `field`. An empty address (no peer to dial) passes."""
        if not address or address in self._peers:
            return
        await self._refreshed()
        if address not in self._peers:
            raise PermissionDenied(
                f"{field} {address!r} is not a decode engine registered with the scheduler; "
                "this engine dials only registered peers"
            )

    async def _refreshed(self) -> None:
        """One refresh shared by every miss that arrives while it runs; a failed one keeps the set."""
        if self._refresh is None:
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._fetch(self._refresh))
        await asyncio.shield(self._refreshing)

    async def _fetch(self, refresh: Refresh) -> None:
        try:
            self.update(await refresh())
        except Exception as exc:  # noqa: BLE001 - the scheduler unreachable: decide on what is known
            log.warning("could not refresh registered peers from the scheduler: %s", exc)
