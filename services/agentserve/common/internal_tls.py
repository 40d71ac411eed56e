"""The internal plane's mutual TLS: what a service presents and whom it trusts.

Every service-to-service call (scheduler -> engines and store, engine -> scheduler, store and peer
engines, tool proxy -> scheduler) runs on the internal plane. With `internal_tls_dir` set, each end
presents a certificate issued by the deployment's private CA (`common/certs.py` issues them) and
requires one from the other: a server refuses a peer without one in the TLS handshake, before any
method runs, and a client refuses a server without one, so an engine never sends KV to an address
that is not a deployment peer.

Trust is "signed by this deployment's CA", not "has this host name": engines advertise addresses
(container IPs, free ports) no certificate could list in advance. So every certificate carries the
one DNS name `INTERNAL_NAME`, and every channel checks the server's certificate against it
(`grpc.ssl_target_name_override`) whatever address it dialed. The CA is created per deployment and
never leaves it, which is what makes that name mean "one of ours".

A directory holds one service's credentials: `ca.pem` (the CA certificate), `cert.pem` and
`key.pem` (the service's own). Empty `internal_tls_dir` = a plain internal plane (development,
single-host tests that ask for it); `agentserve up --local` and compose set it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import grpc

from agentserve.common.internal_identity import CA_FILE, CERT_FILE, INTERNAL_NAME, KEY_FILE

__all__ = ["CA_FILE", "CERT_FILE", "INTERNAL_NAME", "KEY_FILE", "InternalTLS", "internal_tls"]
PEM_MARKERS = {CA_FILE: b"-----BEGIN CERTIFICATE-----", CERT_FILE: b"-----BEGIN CERTIFICATE-----"}


@dataclass(frozen=True)
class InternalTLS:
    """One service's internal-plane credentials, read from a directory (`load`)."""

    ca: bytes = field(repr=False)
    cert: bytes = field(repr=False)
    key: bytes = field(repr=False)
    source: str = ""  # the directory, for messages

    @classmethod
    def load(cls, directory: str, setting: str = "internal_tls_dir") -> InternalTLS:
        """The credentials in `directory`; ValueError naming `setting` and the missing or bad file."""
        root = Path(directory)
        if not root.is_dir():
            raise ValueError(f"{setting}: {directory!r} is not a directory (run `agentserve certs` to make one)")
        data = {}
        for name in (CA_FILE, CERT_FILE, KEY_FILE):
            path = root / name
            try:
                data[name] = path.read_bytes()
            except OSError as exc:
                raise ValueError(f"{setting}: cannot read {path}: {exc.strerror}") from None
            marker = PEM_MARKERS.get(name)
            if marker is not None and marker not in data[name]:
                raise ValueError(f"{setting}: {path} is not a PEM certificate")
            if name == KEY_FILE and b"PRIVATE KEY-----" not in data[name]:
                raise ValueError(f"{setting}: {path} is not a PEM private key")
        return cls(data[CA_FILE], data[CERT_FILE], data[KEY_FILE], str(root))

    def server_credentials(self) -> grpc.ServerCredentials:
        """A server port that completes a handshake only with a client presenting a CA-issued cert."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca, require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """A channel that presents this service's certificate and trusts only CA-issued servers."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca, private_key=self.key, certificate_chain=self.cert
        )

    @staticmethod
    def channel_options() -> list[tuple[str, str]]:
        """Check a server's certificate against the deployment's name, not the address dialed."""
        return [("grpc.ssl_target_name_override", INTERNAL_NAME), ("grpc.default_authority", INTERNAL_NAME)]


@cache
def internal_tls(directory: str) -> InternalTLS | None:
    """The credentials in `directory` (read once per process), or None when it is empty: a plain
    internal plane."""
    return InternalTLS.load(directory) if directory else None
