"""Write the secrets of a deployment beyond one host: the files docker-compose.swarm.yml makes Swarm
secrets of, and the same as Kubernetes Secrets (k8s-secrets.yaml, mounted by deploy/k8s).

    .venv/bin/python scripts/deploy_secrets.py [--out secrets] [--tenant demo]

Run it where you deploy from; `secrets/` is git-ignored. Idempotent: certificates that are valid
and a key already written are kept, so a second run changes nothing the services hold.

    ca/ca.pem, ca/ca.key               the internal plane's private CA (`agentserve certs`); ca.pem
                                       is distributed, ca.key never leaves this directory
    certs/<service>/cert.pem, key.pem  one certificate per service, and `client` and `operator` for
                                       operators' tools (`agentserve drain --tls-dir .../operator`)
    api_keys                           TENANT:sha256:<digest>, the key the scheduler and tool proxy accept
    client_api_key                     the key itself (0600), for clients: AGENTSERVE_API_KEY=$(cat ...)
    k8s-secrets.yaml                   Secrets agentserve-<service>-tls (ca.pem, cert.pem, key.pem) and
                                       agentserve-api-keys (api_keys)
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path

from agentserve.common.api_keys import DIGEST_PREFIX, generate_key, key_digest
from agentserve.common.certs import SERVICES, ensure_certs
from agentserve.common.internal_tls import CA_FILE, CERT_FILE, KEY_FILE

KEY_FILE_NAME, KEYS_FILE_NAME, K8S_FILE_NAME = "client_api_key", "api_keys", "k8s-secrets.yaml"
API_KEYS_SECRET = "agentserve-api-keys"
# The services that run; `client` and `operator` are certificates for people's tools, mounted by none.
DEPLOYED = tuple(s for s in SERVICES if s not in ("client", "operator"))


def tls_secret_name(service: str) -> str:
    return f"agentserve-{service}-tls"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def write_secrets(out: Path, tenant: str = "demo") -> list[str]:
    """Certificates, the API key (made once) and k8s-secrets.yaml under `out`; returns what it issued."""
    out.mkdir(parents=True, exist_ok=True)
    out.chmod(0o700)
    issued = ensure_certs(out / "certs", SERVICES, out / "ca")
    if not (out / KEYS_FILE_NAME).exists():
        key = generate_key()
        _write_private(out / KEY_FILE_NAME, key + "\n")
        # Only the digest goes to the services; the key itself stays here, for clients.
        (out / KEYS_FILE_NAME).write_text(f"{tenant}:{DIGEST_PREFIX}{key_digest(key)}\n")
        issued.append(f"API key for tenant {tenant}")
    _write_private(out / K8S_FILE_NAME, k8s_secrets(out))
    return issued


def k8s_secrets(out: Path) -> str:
    """The Secrets of `out`'s files, as one multi-document YAML."""
    docs = [
        _secret(tls_secret_name(s), {n: out / "certs" / s / n for n in (CA_FILE, CERT_FILE, KEY_FILE)})
        for s in DEPLOYED
    ]
    docs.append(_secret(API_KEYS_SECRET, {KEYS_FILE_NAME: out / KEYS_FILE_NAME}))
    return "---\n".join(docs)


def _secret(name: str, files: dict[str, Path]) -> str:
    data = "".join(f"  {key}: {base64.b64encode(path.read_bytes()).decode()}\n" for key, path in files.items())
    return f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\ntype: Opaque\ndata:\n{data}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("AGENTSERVE_SECRETS_DIR", "secrets")))
    parser.add_argument("--tenant", default="demo", help="the API key's tenant")
    args = parser.parse_args(argv)
    issued = write_secrets(args.out, args.tenant)
    print(f"secrets in {args.out}: issued {', '.join(issued) or 'nothing'}", file=sys.stderr)
    if (args.out / KEY_FILE_NAME).exists():
        print(f"clients: AGENTSERVE_API_KEY=$(cat {args.out / KEY_FILE_NAME})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
