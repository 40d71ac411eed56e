"""The internal plane's credential layout and the name every certificate carries, without grpcio:
the health probe (`common/healthcheck.py`) reads them in an interpreter that loads only the
standard library. `common/internal_tls.py` says what they mean."""

from __future__ import annotations

INTERNAL_NAME = "agentserve-internal"
CA_FILE, CERT_FILE, KEY_FILE = "ca.pem", "cert.pem", "key.pem"
