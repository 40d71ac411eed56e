"""The toolproxy service in the shared server skeleton: gRPC ListTools plus the HTTP data path."""

from __future__ import annotations

import logging

import grpc
from aiohttp import web

from agentserve.common.http_guard import serve_guarded
from agentserve.common.internal_tls import internal_tls
from agentserve.common.server import Service
from agentserve.toolproxy.config import ToolProxyConfig
from agentserve.toolproxy.http_app import build_app
from agentserve.toolproxy.predictor import ToolDurationPredictor
from agentserve.toolproxy.proxy import ToolProxy
from agentserve.toolproxy.reporter import SchedulerReporter
from agentserve.toolproxy.servicer import ToolProxyServicer
from agentserve.toolproxy.tools import ToolRegistry, UpstreamClient
from agentserve.v1 import toolproxy_pb2, toolproxy_pb2_grpc

log = logging.getLogger(__name__)


class ToolProxyService(Service):
    def __init__(self, config: ToolProxyConfig) -> None:
        self.config = config
        self._upstream = UpstreamClient(config.upstream_timeout_s)
        self.reporter = SchedulerReporter(
            config.scheduler_address, config.report_timeout_s, tls=internal_tls(config.internal_tls_dir)
        )
        registry = ToolRegistry.build(config.upstream_urls, self._upstream, config.max_sleep_s)
        self.proxy = ToolProxy(registry, ToolDurationPredictor(config.default_prediction_s), self.reporter)
        self._runner: web.AppRunner | None = None

    def add_to_server(self, server: grpc.aio.Server) -> list[str]:
        toolproxy_pb2_grpc.add_ToolProxyServicer_to_server(ToolProxyServicer(self.proxy), server)
        return [toolproxy_pb2.DESCRIPTOR.services_by_name["ToolProxy"].full_name]

    async def start(self) -> None:
        await self._upstream.start()
        await self.reporter.start()
        self._runner = await serve_guarded(
            build_app(self.proxy, self.config.keys()), self.config.host, self.config.http_port, self.config.http
        )
        log.info(
            "tools on http://%s:%d/tools/<name> (%s); events to %s",
            self.config.host,
            self.config.http_port,
            ", ".join(t.name for t in self.proxy.tools()),
            self.config.scheduler_address,
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.reporter.stop()
        await self._upstream.close()
