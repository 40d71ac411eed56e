"""The address a service tells its peers to dial.

An engine registers `host:port` with the scheduler; prefill, decode and the scheduler dial it. In
docker compose an engine sits on two networks (`storage` and `compute`), so it has two IPs, and
`--scale decode=3` rules out a fixed name per replica. The IP peers should dial is the one on the
compute network, where engine-to-engine KV travels.

`AGENTSERVE_ADVERTISE_NETWORK` names that network from inside the container, where network names
are invisible, in one of two ways:
- a CIDR (`10.20.0.0/16`): the local address inside it;
- a host name or IP on the network (compose: a per-network alias): the local address this host
  would send from to reach it. No packet is sent.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket

log = logging.getLogger(__name__)

NETWORK_ENV = "AGENTSERVE_ADVERTISE_NETWORK"
FALLBACK_HOST = "127.0.0.1"
_PROBE_PORT = 9  # discard; a UDP connect only picks a route


def advertise_host(configured: str, network: str | None = None) -> str:
    """Host part of the address peers dial to reach this process.

    `configured` wins when non-empty. Otherwise the address on `network` (default: the
    AGENTSERVE_ADVERTISE_NETWORK env var; see the module docstring), else the address this host
    name resolves to, else 127.0.0.1. Never raises: a hint that does not resolve falls through.
    """
    if configured:
        return configured
    hint = os.environ.get(NETWORK_ENV, "") if network is None else network
    if hint:
        host = address_on_network(hint)
        if host:
            return host
        log.warning("%s=%s matches no local address; advertising the host name's address", NETWORK_ENV, hint)
    return _hostname_address()


def address_on_network(hint: str) -> str:
    """The local IPv4 address on the network `hint` names (CIDR or a host on it); '' if none."""
    try:
        subnet = ipaddress.ip_network(hint, strict=False) if "/" in hint else None
    except ValueError:
        return ""
    if subnet is not None:
        # The connected route to any address in the subnet leaves from our address in it.
        probe = subnet.network_address + 1 if subnet.num_addresses > 1 else subnet.network_address
        local = _source_address_towards(str(probe))
        return local if local and ipaddress.ip_address(local) in subnet else ""
    try:
        target = socket.gethostbyname(hint)
    except OSError:
        return ""
    return _source_address_towards(target)


def _source_address_towards(ip: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((ip, _PROBE_PORT))
            return sock.getsockname()[0]
        except OSError:
            return ""


def _hostname_address() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return FALLBACK_HOST


_handed_out: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, never one this process was given before.

    The kernel may offer a just-closed port again at once, so two calls in a row could return the
    same number and two services started side by side would collide; remembering what was handed
    out rules that out (another process can still take the port before it is bound: rare).
    """
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
