"""The tools the proxy can call: built-ins (`sleep`, `echo`) and upstream HTTP tools.

A tool takes the call's JSON arguments and returns a `ToolResult` (status, body, content type)
that the proxy relays unchanged. Bad arguments raise ValueError, which the proxy answers with 400.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

JSON = "application/json"


@dataclass(frozen=True)
class ToolResult:
    status: int
    body: bytes
    content_type: str = JSON

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def json(cls, payload: Any, status: int = 200) -> ToolResult:
        return cls(status, json.dumps(payload).encode())

    @classmethod
    def error(cls, status: int, message: str, type_: str) -> ToolResult:
        return cls.json({"error": {"message": message, "type": type_}}, status)


class Tool(Protocol):
    name: str
    kind: str  # "builtin" | "upstream"

    async def call(self, args: Mapping[str, Any], session_id: str) -> ToolResult: ...


class SleepTool:
    """Waits `{"seconds": x}`: a stand-in for a slow tool in tests, demos and benchmarks."""

    name, kind = "sleep", "builtin"

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s

    async def call(self, args: Mapping[str, Any], session_id: str) -> ToolResult:
        seconds = args.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise ValueError(f"sleep needs a number 'seconds', got {seconds!r}")
        if not 0 <= seconds <= self.max_s:
            raise ValueError(f"sleep 'seconds' must be in [0, {self.max_s}], got {seconds}")
        await asyncio.sleep(seconds)
        return ToolResult.json({"slept_s": seconds})


class EchoTool:
    """Returns its arguments."""

    name, kind = "echo", "builtin"

    async def call(self, args: Mapping[str, Any], session_id: str) -> ToolResult:
        return ToolResult.json(dict(args))


class UpstreamClient:
    """The one HTTP client session all upstream tools share; opened in the service's event loop."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("UpstreamClient.start() was not awaited")
        return self._session


class UpstreamTool:
    """POSTs the arguments to a configured URL and relays the upstream's status and body.

    An unreachable upstream is a 502 and a slow one a 504, so the agent sees a tool failure
    rather than a proxy crash.
    """

    kind = "upstream"

    def __init__(self, name: str, url: str, client: UpstreamClient) -> None:
        self.name, self.url, self._client = name, url, client

    async def call(self, args: Mapping[str, Any], session_id: str) -> ToolResult:
        headers = {"X-Session-Id": session_id} if session_id else {}
        try:
            async with self._client.session.post(self.url, json=dict(args), headers=headers) as resp:
                body = await resp.read()
                return ToolResult(resp.status, body, resp.content_type or "application/octet-stream")
        except TimeoutError:
            return ToolResult.error(504, f"upstream tool {self.name} timed out", "upstream_timeout")
        except aiohttp.ClientError as exc:
            return ToolResult.error(502, f"upstream tool {self.name} failed: {exc}", "upstream_error")


class ToolRegistry:
    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        if len(self._tools) != len(tools):
            raise ValueError("tool names must be unique")

    @classmethod
    def build(cls, upstreams: Mapping[str, str], client: UpstreamClient, max_sleep_s: float) -> ToolRegistry:
        builtins: list[Tool] = [SleepTool(max_sleep_s), EchoTool()]  # the names config.BUILTIN_TOOLS reserves
        return cls([*builtins, *(UpstreamTool(name, url, client) for name, url in upstreams.items())])

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())
