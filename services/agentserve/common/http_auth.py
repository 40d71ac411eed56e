"""API-key authentication of HTTP requests, as one aiohttp middleware every HTTP front installs.

With keys configured, every route but the `open_paths` (health probes) needs
`Authorization: Bearer <key>`; the key's tenant is stored on the request (`caller`). Without keys,
nothing is checked. The middleware sits inside the error middleware, so a refusal is the front's
JSON error with status 401 and `WWW-Authenticate: Bearer`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from aiohttp import web

from agentserve.common.api_keys import ApiKeys, resolve_tenant
from agentserve.common.http_errors import Handler


@dataclass(frozen=True)
class Caller:
    """Who a request acts for: `tenant` (whose cache it shares) and `owner` (whose sessions it
    sees: the key's tenant, or "" without keys)."""

    tenant: str
    owner: str


AUTHENTICATED = web.RequestKey("authenticated_tenant", str)
KEYS = web.AppKey("api_keys", ApiKeys)


def api_key_auth(keys: ApiKeys, open_paths: Collection[str] = ("/health",)) -> Handler:
    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if keys.enabled and request.path not in open_paths:
            request[AUTHENTICATED] = keys.tenant_of_authorization(request.headers.get("Authorization"))
        return await handler(request)

    return authenticate


def caller(request: web.Request, tenant_header: str = "X-Tenant") -> Caller:
    """The request's tenant: the API key's, with keys (a different `X-Tenant` is a 400); the
    `X-Tenant` header's, without."""
    keys = request.app.get(KEYS) or ApiKeys()
    authenticated = request.get(AUTHENTICATED)
    tenant = resolve_tenant(keys, authenticated, request.headers.get(tenant_header, ""), tenant_header)
    return Caller(tenant, authenticated or "")
