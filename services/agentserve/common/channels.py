"""gRPC client channels: every one opened the same way, and a cache of them keyed by address.

A channel carries the project's message limits (`server.GRPC_OPTIONS`) and the client
interceptors, so every call carries the caller's trace context. A channel on the internal plane
takes the service's `InternalTLS` (None: a plain internal plane); clients' channels never do.
Channels are bound to the event loop they are opened in: open them inside the loop that uses them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from agentserve.common.interceptors import client_interceptors
from agentserve.common.internal_tls import InternalTLS
from agentserve.common.server import GRPC_OPTIONS

# Each channel owns its connections: by default channels with the same options share subchannels
# process-wide, so a fresh channel to a peer that restarted inherits the old one's reconnect backoff
# (seconds to minutes of "Connection refused" after the peer is back) and forgetting a dead peer's
# channel (`ChannelCache.forget`, `KVStoreClient`) would not help.
CHANNEL_OPTIONS = [*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]


def open_channel(address: str, tls: InternalTLS | None = None, connect_timeout_ms: int = 0) -> grpc.aio.Channel:
    """A channel to host:port `address`, made the project's way: mutual TLS with `tls`, else plain.
    `connect_timeout_ms` (0: gRPC's 20 s) bounds each connection attempt, and so how long a call
    waits before it fails on a peer whose host no longer answers at all (a container gone with its
    address: no refusal comes back, the SYNs go unanswered)."""
    options = list(CHANNEL_OPTIONS)
    if connect_timeout_ms:
        # gRPC core takes this as the minimum connect timeout: an attempt's deadline is the larger
        # of it and the current reconnect backoff.
        options.append(("grpc.min_reconnect_backoff_ms", connect_timeout_ms))
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=client_interceptors())
    return grpc.aio.secure_channel(
        address,
        tls.channel_credentials(),
        options=[*options, *tls.channel_options()],
        interceptors=client_interceptors(),
    )


class ChannelCache:
    """One channel per peer address, opened on first use and kept: gRPC channels reconnect on
    their own, and a call must not pay a TCP and HTTP/2 handshake.

    A channel in reconnect backoff fails new calls fast for up to minutes, so a peer found dead is
    `forget`-ten: a peer restarted on the same address then gets a fresh channel. The old one is
    left to calls still on it and closed with the rest by `close`.
    """

    def __init__(self, tls: InternalTLS | None = None, connect_timeout_ms: int = 0) -> None:
        self._tls = tls
        self._connect_timeout_ms = connect_timeout_ms
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._retired: list[grpc.aio.Channel] = []

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self._tls, self._connect_timeout_ms)
        return channel

    def forget(self, address: str) -> None:
        channel = self._channels.pop(address, None)
        if channel is not None:
            self._retired.append(channel)

    @asynccontextmanager
    async def calling(self, address: str) -> AsyncIterator[grpc.aio.Channel]:
        """The channel to `address`, forgotten if a call made on it inside finds the peer UNAVAILABLE."""
        try:
            yield self.get(address)
        except grpc.aio.AioRpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                self.forget(address)
            raise

    async def close(self) -> None:
        channels = [*self._channels.values(), *self._retired]
        self._channels, self._retired = {}, []
        for channel in channels:
            await channel.close()
