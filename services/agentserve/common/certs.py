"""Issuing the internal plane's certificates: a private CA per deployment, one certificate per service.

`ensure_certs(out, services, ca_dir)` is idempotent, so it runs at every start (`agentserve up
--local`) or as a one-shot before the services (compose's `certs`): the first run creates the CA and
issues every certificate; later runs keep what is valid and issue only what is missing, expiring
within `RENEW_BEFORE` or not issued by the CA in `ca_dir`.

    ca_dir/ca.pem, ca_dir/ca.key        the CA; its key stays here, never in a service's directory
    out/<service>/ca.pem, cert.pem, key.pem     what `internal_tls_dir=out/<service>` reads

Keys are ECDSA P-256 (fast to make and to handshake with), written 0600. Certificates carry the
service's name and `INTERNAL_NAME`, the name every internal channel verifies (see internal_tls.py).
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentserve.common.internal_tls import CA_FILE, CERT_FILE, INTERNAL_NAME, KEY_FILE

# Services of a deployment; `client` is for tools that look at internal services (up's health
# probes, operators' scripts, tests), `operator` for commands that act on them (`agentserve drain`).
SERVICES = ("kvstore", "scheduler", "prefill", "decode", "toolproxy", "client", "operator")
CA_KEY_FILE = "ca.key"
CA_VALID = datetime.timedelta(days=3650)
CERT_VALID = datetime.timedelta(days=397)
RENEW_BEFORE = datetime.timedelta(days=30)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write atomically (a reader never sees half a key), a private file 0600 from its creation."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "agentserve"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _ca(ca_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA in `ca_dir`, created if absent or expiring."""
    cert_path, key_path = ca_dir / CA_FILE, ca_dir / CA_KEY_FILE
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if isinstance(key, ec.EllipticCurvePrivateKey) and cert.not_valid_after_utc - _now() > RENEW_BEFORE:
            return cert, key
    ca_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("agentserve internal CA"))
        .issuer_name(_name("agentserve internal CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + CA_VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def issue(service: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for `service`, valid for serving and calling on the internal plane."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(service))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + CERT_VALID, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(INTERNAL_NAME), x509.DNSName(service)]), critical=False
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _still_good(directory: Path, ca_cert: x509.Certificate) -> bool:
    """Whether `directory` holds a key and a certificate issued by `ca_cert`, not expiring soon."""
    try:
        cert = x509.load_pem_x509_certificate((directory / CERT_FILE).read_bytes())
        ca_copy = (directory / CA_FILE).read_bytes()
        has_key = (directory / KEY_FILE).stat().st_size > 0
    except (OSError, ValueError):
        return False
    if not has_key or ca_copy != ca_cert.public_bytes(serialization.Encoding.PEM):
        return False
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return cert.not_valid_after_utc - _now() > RENEW_BEFORE


def ensure_certs(out: Path, services: Sequence[str] = SERVICES, ca_dir: Path | None = None) -> list[str]:
    """Make `out/<service>` hold valid credentials for each of `services`; returns those issued now."""
    for service in services:
        if not service or "/" in service or service.startswith("."):
            raise ValueError(f"service names are directory names, got {service!r}")
    ca_cert, ca_key = _ca(ca_dir or out / "ca")
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    issued = []
    for service in services:
        directory = out / service
        if _still_good(directory, ca_cert):
            continue
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = issue(service, ca_cert, ca_key)
        _write(directory / KEY_FILE, key, private=True)
        _write(directory / CERT_FILE, cert)
        _write(directory / CA_FILE, ca_pem)
        issued.append(service)
    return issued
