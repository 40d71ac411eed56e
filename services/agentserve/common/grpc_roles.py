"""Per-role authorisation of internal-plane calls, in one server interceptor.

Installed by `server.serve` on every port that runs mutual TLS (the internal plane). The handshake
already proved the caller's certificate is the deployment CA's; this reads the role it names (the
certificate's common name, from the call's TLS auth context) and lets the call reach the servicer
only if `InternalRoles` (the table in internal_roles.py) says that role calls that method. Otherwise
the call fails PERMISSION_DENIED before the servicer sees its request (the error interceptor
outside this one turns `PermissionDenied` into the status).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc

from agentserve.common.interceptors import Behavior, Continuation
from agentserve.common.internal_roles import InternalRoles

COMMON_NAME = "x509_common_name"


def role_of(auth_context: Mapping[str, Any]) -> str | None:
    """The role a TLS peer's certificate names (its common name); None for a peer without one."""
    names = auth_context.get(COMMON_NAME) or ()
    for name in names:
        return name.decode() if isinstance(name, bytes) else str(name)
    return None


class RoleInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, roles: InternalRoles | None = None) -> None:
        self.roles = roles or InternalRoles()

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or self.roles.allows(method, None):  # unknown method, or open to every peer
            return handler
        request = "stream" if handler.request_streaming else "unary"
        kind = f"{request}_{'stream' if handler.response_streaming else 'unary'}"
        return handler._replace(**{kind: _authorised(getattr(handler, kind), self.roles, method)})


def _authorised(behavior: Behavior, roles: InternalRoles, method: str) -> Behavior:
    """`behavior`, run only when the caller's role may call `method`, else raising PermissionDenied."""
    if inspect.isasyncgenfunction(behavior):

        @functools.wraps(behavior)
        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            roles.check(method, role_of(context.auth_context()))
            async for item in behavior(request, context):
                yield item

        return stream

    @functools.wraps(behavior)
    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        roles.check(method, role_of(context.auth_context()))
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return unary
