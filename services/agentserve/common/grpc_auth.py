"""API-key authentication of gRPC calls, in one server interceptor.

A call to one of the `protected` methods must carry `authorization: Bearer <key>` metadata; the
key's tenant is then current (`authenticated_tenant()`) while the servicer runs. A call without a
valid key fails UNAUTHENTICATED before the servicer sees it (the error interceptor outside this one
turns `Unauthenticated` into the status), and before its request is parsed, so malformed bytes
without a key are UNAUTHENTICATED too, not INVALID_ARGUMENT. Other methods (health, reflection, the engines' internal
plane) pass untouched. With no keys configured nothing is checked and no tenant is current.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Collection
from typing import Any

import grpc

from agentserve.common.api_keys import ApiKeys
from agentserve.common.errors import Unauthenticated
from agentserve.common.interceptors import Behavior, Continuation

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentserve_tenant", default=None)


def authenticated_tenant() -> str | None:
    """The tenant of the API key of the gRPC call being served; None without authentication."""
    return _TENANT.get()


def _authorization(details: grpc.HandlerCallDetails) -> str | None:
    for key, value in details.invocation_metadata or ():
        if key == "authorization":
            return value.decode() if isinstance(value, bytes) else value
    return None


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, keys: ApiKeys, protected: Collection[str]) -> None:
        """`protected`: full method names (`/agentserve.v1.Scheduler/Turn`) that need a key."""
        self.keys = keys
        self.protected = frozenset(protected)

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or not self.keys.enabled or handler_call_details.method not in self.protected:
            return handler
        try:
            tenant: str | Unauthenticated = self.keys.tenant_of_authorization(_authorization(handler_call_details))
        except Unauthenticated as exc:
            tenant = exc
        request = "stream" if handler.request_streaming else "unary"
        kind = f"{request}_{'stream' if handler.response_streaming else 'unary'}"
        replaced: dict[str, Any] = {kind: _as_tenant(getattr(handler, kind), tenant)}
        if isinstance(tenant, Unauthenticated):
            # The request of a call without a valid key is never parsed: it fails UNAUTHENTICATED
            # whatever its bytes, and untrusted bytes reach no parser.
            replaced["request_deserializer"] = _unparsed
        return handler._replace(**replaced)


def _unparsed(raw: bytes) -> None:
    return None


def _as_tenant(behavior: Behavior, tenant: str | Unauthenticated) -> Behavior:
    """`behavior` run with `tenant` current, or raising its authentication failure."""
    if inspect.isasyncgenfunction(behavior):

        @functools.wraps(behavior)
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(tenant, Unauthenticated):
                raise tenant
            token = _TENANT.set(tenant)
            try:
                async for item in behavior(request, context):
                    yield item
            finally:
                _TENANT.reset(token)

        return stream

    @functools.wraps(behavior)
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(tenant, Unauthenticated):
            raise tenant
        token = _TENANT.set(tenant)
        try:
            return await behavior(request, context)
        finally:
            _TENANT.reset(token)

    return unary
