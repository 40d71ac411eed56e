"""gRPC `ToolProxy` servicer: translates ListTools to `ToolProxy.tools()`."""

from __future__ import annotations

import grpc

from agentserve.toolproxy.proxy import ToolProxy
from agentserve.v1 import toolproxy_pb2, toolproxy_pb2_grpc


class ToolProxyServicer(toolproxy_pb2_grpc.ToolProxyServicer):
    def __init__(self, proxy: ToolProxy) -> None:
        self._proxy = proxy

    async def ListTools(
        self, request: toolproxy_pb2.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> toolproxy_pb2.ListToolsResponse:
        return toolproxy_pb2.ListToolsResponse(
            tools=[
                toolproxy_pb2.ToolInfo(
                    name=t.name, kind=t.kind, predicted_duration_s=t.predicted_duration_s, calls=t.calls
                )
                for t in self._proxy.tools()
            ]
        )
