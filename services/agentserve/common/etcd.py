"""A small etcd v3 client over etcd's JSON gateway (HTTP/1.1 + JSON, served by every etcd 3.4 member
on its client URL), with aiohttp: the key-value and lease calls the scheduler's shared state needs.

The gateway takes the gRPC API's messages as JSON: keys and values are base64, 64-bit integers are
strings, and fields at their default (0, false, empty) are left out of replies. Paths are those of
etcd 3.4 (`/v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant`, `/v3/lease/keepalive`,
`/v3/kv/lease/revoke`). Several endpoints are tried in turn: a member that does not answer is
skipped; an error etcd returns is raised (`EtcdError`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp


class EtcdError(RuntimeError):
    """etcd answered with an error, or no endpoint answered."""


@dataclass(frozen=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def of(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(
            _unb64(kv.get("key", "")),
            _unb64(kv.get("value", "")),
            int(kv.get("create_revision", 0)),
            int(kv.get("mod_revision", 0)),
            int(kv.get("version", 0)),
            int(kv.get("lease", 0)),
        )


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the transaction
    responses: list[dict[str, Any]]  # one per operation of the branch that ran

    def ranges(self, index: int) -> list[KeyValue]:
        """The key-values the `index`-th operation (a range) read."""
        return [KeyValue.of(kv) for kv in self.responses[index].get("response_range", {}).get("kvs", [])]


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def prefix_end(prefix: bytes) -> bytes:
    """The `range_end` that makes a range cover every key starting with `prefix`."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


# Comparisons and operations of a transaction, as the gateway's JSON.
def version_is(key: bytes, version: int) -> dict[str, Any]:
    """The key's version (number of writes since created) is `version`; 0 means the key is absent."""
    return {"key": _b64(key), "target": "VERSION", "result": "EQUAL", "version": str(version)}


def mod_revision_is(key: bytes, revision: int) -> dict[str, Any]:
    """The key was last written at `revision` (0: the key is absent)."""
    return {"key": _b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(revision)}


def value_is(key: bytes, value: bytes) -> dict[str, Any]:
    return {"key": _b64(key), "target": "VALUE", "result": "EQUAL", "value": _b64(value)}


def lease_is(key: bytes, lease: int) -> dict[str, Any]:
    return {"key": _b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(lease)}


def put_op(key: bytes, value: bytes, lease: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        request["lease"] = str(lease)
    return {"request_put": request}


def range_op(key: bytes, keys_only: bool = False) -> dict[str, Any]:
    request: dict[str, Any] = {"key": _b64(key)}
    if keys_only:
        request["keys_only"] = True
    return {"request_range": request}


def delete_op(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": _b64(key)}}


class Etcd:
    def __init__(self, endpoints: Sequence[str], timeout_s: float = 5.0) -> None:
        """`endpoints`: client URLs (`http://127.0.0.1:2379`) or `host:port`s of one etcd cluster."""
        if not endpoints:
            raise ValueError("etcd needs at least one endpoint")
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._current = 0  # the endpoint that answered last: tried first

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        failures = []
        for attempt in range(len(self.endpoints)):
            index = (self._current + attempt) % len(self.endpoints)
            try:
                async with self._http.post(f"{self.endpoints[index]}{path}", json=body) as reply:
                    answer = await reply.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                failures.append(f"{self.endpoints[index]}: {exc!r}")
                continue
            self._current = index
            if isinstance(answer, dict) and ("error" in answer or reply.status != 200):
                raise EtcdError(f"etcd {path}: {answer.get('message') or answer.get('error') or reply.status}")
            return answer
        raise EtcdError(f"no etcd endpoint answered {path}: {'; '.join(failures)}")

    async def get(self, key: bytes) -> KeyValue | None:
        found = await self.range(key)
        return found[0] if found else None

    async def range(self, key: bytes, *, prefix: bool = False, keys_only: bool = False) -> list[KeyValue]:
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        if keys_only:
            body["keys_only"] = True
        reply = await self._call("/v3/kv/range", body)
        return [KeyValue.of(kv) for kv in reply.get("kvs", [])]

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        """Write `key`; returns the revision of the write."""
        body: dict[str, Any] = put_op(key, value, lease)["request_put"]
        reply = await self._call("/v3/kv/put", body)
        return int(reply["header"]["revision"])

    async def delete(self, key: bytes, *, prefix: bool = False) -> int:
        """Delete `key` (every key under it with `prefix`); returns how many were deleted."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _b64(prefix_end(key))
        reply = await self._call("/v3/kv/deleterange", body)
        return int(reply.get("deleted", 0))

    async def txn(
        self,
        compare: Sequence[dict[str, Any]],
        success: Sequence[dict[str, Any]],
        failure: Sequence[dict[str, Any]] = (),
    ) -> TxnResult:
        """If every comparison holds, run `success`'s operations, else `failure`'s: atomically."""
        reply = await self._call(
            "/v3/kv/txn", {"compare": list(compare), "success": list(success), "failure": list(failure)}
        )
        return TxnResult(
            bool(reply.get("succeeded", False)), int(reply["header"]["revision"]), reply.get("responses", [])
        )

    async def grant(self, ttl_s: int) -> int:
        """A new lease of `ttl_s` seconds; its id."""
        reply = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(reply["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renew `lease`; its TTL now, 0 when it has expired (its keys are gone)."""
        reply = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(reply.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End `lease` now, deleting the keys attached to it; an unknown lease is no error."""
        try:
            await self._call("/v3/kv/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "lease not found" not in str(exc):
                raise

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
