"""API keys: which tenant a client is, from the key it presents.

Keys come from `AGENTSERVE_API_KEYS` (`--api-keys`) and/or a keys file (`--api-keys-file`), as
entries `TENANT:KEY` (comma-separated in the variable, one a line in the file, `#` comments). An
entry `TENANT:sha256:<64 hex digits>` names a key by its SHA-256 digest, so a keys file need not
hold the keys themselves. Only digests are kept in memory either way; a lookup hashes the
presented key and compares digests in constant time.

An entry may end with ` weight=W` (a positive number): the tenant's weight in the scheduler's fair
queue (`scheduler/fair_queue.py`), its share of the turns running against other tenants' weights.
A tenant without one weighs 1; the entries of one tenant must not name different weights.

Keys are long random secrets (at least `MIN_KEY_LENGTH` characters), not passwords: a plain
SHA-256 is the right hash for them (a slow password hash would only slow every request).
`generate_key` makes one.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from agentserve.common.errors import Unauthenticated

MIN_KEY_LENGTH = 20
TENANT_PATTERN = re.compile(r"[A-Za-z0-9._\-]{1,64}")
KEY_PATTERN = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: what fits a Bearer header
DIGEST_PREFIX = "sha256:"
BEARER = "bearer "
WEIGHT_SUFFIX = re.compile(r"\s+weight=(\S*)$")


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key(prefix: str = "as-") -> str:
    """A fresh key: 32 random bytes, URL-safe, behind `prefix`."""
    return prefix + secrets.token_urlsafe(32)


class ApiKeys:
    """The tenants' keys, held as SHA-256 digests. Empty means authentication is off."""

    def __init__(self, digests: dict[str, str] | None = None, weights: dict[str, float] | None = None) -> None:
        self._tenants = dict(digests or {})  # digest -> tenant
        self.weights = dict(weights or {})  # tenant -> weight, for those whose entries name one

    @classmethod
    def parse(cls, entries: Iterable[str], source: str = "API keys") -> ApiKeys:
        """Keys from `TENANT:KEY` / `TENANT:sha256:<hex>` entries; ValueError naming `source` and
        the entry's position (never the key) for a malformed one or a key listed twice."""
        digests: dict[str, str] = {}
        weights: dict[str, float] = {}
        for position, raw in enumerate(entries, 1):
            entry = raw.strip()
            weight = WEIGHT_SUFFIX.search(entry)
            if weight is not None:
                entry = entry[: weight.start()]
            if not entry or entry.startswith("#"):
                continue
            tenant, sep, key = entry.partition(":")
            where = f"{source}, entry {position}"
            if not sep or not key:
                raise ValueError(f"{where}: must be TENANT:KEY")
            if not TENANT_PATTERN.fullmatch(tenant):
                raise ValueError(f"{where}: tenant {tenant!r} must be 1-64 letters, digits or . _ -")
            if key.startswith(DIGEST_PREFIX):
                digest = key[len(DIGEST_PREFIX) :].lower()
                if not re.fullmatch(r"[0-9a-f]{64}", digest):
                    raise ValueError(f"{where}: a sha256: key must be 64 hex digits")
            else:
                if len(key) < MIN_KEY_LENGTH or not KEY_PATTERN.fullmatch(key):
                    raise ValueError(
                        f"{where}: the key must be at least {MIN_KEY_LENGTH} printable ASCII characters "
                        "without spaces (`agentserve keys generate` makes one)"
                    )
                digest = key_digest(key)
            if digest in digests:
                raise ValueError(f"{where}: this key is already listed (for tenant {digests[digest]!r})")
            if weight is not None:
                _add_weight(weights, tenant, weight.group(1), where)
            digests[digest] = tenant
        return cls(digests, weights)

    @classmethod
    def load(cls, keys: str = "", keys_file: str = "") -> ApiKeys:
        """The keys of a service's config: the comma-separated `keys` plus the lines of `keys_file`."""
        entries = [("AGENTSERVE_API_KEYS", keys.split(","))] if keys else []
        if keys_file:
            try:
                lines = Path(keys_file).read_text().splitlines()
            except OSError as exc:
                raise ValueError(f"api_keys_file {keys_file!r}: {exc.strerror or exc}") from None
            entries.append((f"api_keys_file {keys_file}", lines))
        digests: dict[str, str] = {}
        weights: dict[str, float] = {}
        for source, items in entries:
            parsed = cls.parse(items, source)
            part = parsed._tenants
            clash = digests.keys() & part.keys()
            if clash:
                raise ValueError(f"{source}: a key is listed twice (for tenant {digests[next(iter(clash))]!r})")
            for tenant, weight in parsed.weights.items():
                if weights.setdefault(tenant, weight) != weight:
                    raise ValueError(
                        f"{source}: tenant {tenant!r} has weight {weights[tenant]:g} elsewhere, here {weight:g}"
                    )
            digests.update(part)
        return cls(digests, weights)

    @property
    def enabled(self) -> bool:
        return bool(self._tenants)

    @property
    def tenants(self) -> frozenset[str]:
        return frozenset(self._tenants.values())

    def tenant_of(self, key: str) -> str:
        """The tenant holding `key`; Unauthenticated for any other key."""
        presented = key_digest(key)
        tenant = None
        # Every digest compared, in constant time each: the answer's timing says nothing of the keys.
        for digest, holder in self._tenants.items():
            if hmac.compare_digest(digest, presented):
                tenant = holder
        if tenant is None:
            raise Unauthenticated("invalid API key")
        return tenant

    def tenant_of_authorization(self, authorization: str | None) -> str:
        """The tenant of an `Authorization: Bearer <key>` value (HTTP header or gRPC metadata)."""
        if not authorization:
            raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
        if not authorization[: len(BEARER)].lower() == BEARER:
            raise Unauthenticated("the Authorization value must be 'Bearer <key>'")
        return self.tenant_of(authorization[len(BEARER) :].strip())


def _add_weight(weights: dict[str, float], tenant: str, text: str, where: str) -> None:
    """Record the `weight=W` of `tenant`'s entry; ValueError naming `where` for a bad or clashing one."""
    try:
        weight = float(text)
    except ValueError:
        weight = float("nan")
    if not (weight > 0 and math.isfinite(weight)):
        raise ValueError(f"{where}: weight must be a positive number, got {text!r}")
    if weights.setdefault(tenant, weight) != weight:
        raise ValueError(f"{where}: tenant {tenant!r} has weight {weights[tenant]:g} in another entry, here {weight:g}")


def resolve_tenant(keys: ApiKeys, authenticated: str | None, claimed: str, what: str) -> str:
    """The tenant a request acts for. With keys, the key's tenant: a `claimed` one (an `X-Tenant`
    header, an `OpenSession.tenant` field) must be empty or the same. Without keys, the claim."""
    if not keys.enabled:
        return claimed
    if authenticated is None:  # a route the authentication left open reached a tenant's data
        raise Unauthenticated("missing API key: send 'Authorization: Bearer <key>'")
    if claimed and claimed != authenticated:
        raise ValueError(f"{what} {claimed!r} does not match the API key's tenant; the tenant comes from the key")
    return authenticated
