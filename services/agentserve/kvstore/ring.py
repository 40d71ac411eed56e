"""Consistent hashing of block ids over kvstore instances, and finding the instances.

Every client builds the same ring from the same set of addresses (order does not matter), so all
engines and the scheduler agree on where a block lives. Adding an instance moves only about 1/N
of the blocks; a block that moved reads as a miss on its new instance (recomputed and stored
again), never as wrong data.
"""

from __future__ import annotations

import bisect
import hashlib
import ipaddress
import socket
from collections.abc import Sequence

DEFAULT_VNODES = 128


def _point(key: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


class HashRing:
    def __init__(self, nodes: Sequence[str], vnodes: int = DEFAULT_VNODES) -> None:
        if not nodes:
            raise ValueError("a hash ring needs at least one node")
        if vnodes <= 0:
            raise ValueError(f"vnodes must be positive, got {vnodes}")
        self.nodes = tuple(sorted(set(nodes)))
        points = sorted((_point(f"{node}#{i}".encode()), node) for node in self.nodes for i in range(vnodes))
        self._keys = [p for p, _ in points]
        self._owners = [n for _, n in points]

    def node_for(self, block_id: bytes) -> str:
        i = bisect.bisect(self._keys, _point(bytes(block_id)))
        return self._owners[i % len(self._owners)]


def resolve_addresses(spec: str) -> list[str]:
    """`host:port[,host:port...]` -> one `ip:port` per instance, sorted.

    A name that resolves to several IPs (a compose service scaled out, a headless k8s service)
    stands for all of them. IPv4 answers are preferred, so `localhost` is one instance, not two.
    """
    addresses: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"kvstore address must be host:port, got {part!r}")
        try:
            ipaddress.ip_address(host)
            ips = [host]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except socket.gaierror as exc:
                raise ValueError(f"cannot resolve kvstore host {host!r}: {exc}") from None
            # A host name answers only in the inet families, whose socket address starts with the IP.
            answers = [(family, str(sockaddr[0])) for family, _, _, _, sockaddr in infos]
            v4 = [ip for family, ip in answers if family == socket.AF_INET]
            ips = v4 or [ip for _, ip in answers]
        for ip in ips:
            addresses.add(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}")
    if not addresses:
        raise ValueError(f"no kvstore addresses in {spec!r}")
    return sorted(addresses)
