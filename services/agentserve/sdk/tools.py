"""Tool calls through the agentserve tool proxy (`POST {toolproxy_url}/tools/{name}`).

Going through the proxy is what lets the scheduler see the session wait on a tool and move its
KV out of the way meanwhile; the session id travels in `X-Session-Id`, and the trace context the
call belongs to (the session's latest turn) in `traceparent`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp

from agentserve.sdk.errors import RetryableError, error_from_http

PREDICTED_HEADER = "X-Tool-Predicted-S"


class ToolClient:
    """One aiohttp session per client, opened on first use inside the caller's event loop."""

    def __init__(self, toolproxy_url: str, timeout_s: float | None = None, api_key: str = "") -> None:
        if not toolproxy_url.startswith(("http://", "https://")):
            raise ValueError(f"toolproxy_url must be an http(s) URL, got {toolproxy_url!r}")
        self._base = toolproxy_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._http: aiohttp.ClientSession | None = None
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def call(
        self,
        name: str,
        args: Mapping[str, Any] | None,
        session_id: str,
        traceparent: str = "",
        predicted_s: float | None = None,
    ) -> dict[str, Any]:
        """The tool's JSON answer as a dict (a non-object answer comes back as {"result": value},
        a non-JSON one as {"text": body}). Raises ToolCallError on a non-2xx answer. `predicted_s`
        (the caller's duration estimate) travels in `X-Tool-Predicted-S`; ValueError unless it is
        a finite number >= 0."""
        if predicted_s is not None and not 0 <= predicted_s < float("inf"):
            raise ValueError(f"predicted_s must be a finite number of seconds >= 0, got {predicted_s}")
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout)
        url = f"{self._base}/tools/{quote(name, safe='')}"
        headers = {"X-Session-Id": session_id, **self._auth}
        if traceparent:
            headers["traceparent"] = traceparent
        if predicted_s is not None:
            headers[PREDICTED_HEADER] = repr(float(predicted_s))
        try:
            async with self._http.post(url, json=dict(args or {}), headers=headers) as resp:
                status, raw = resp.status, await resp.read()
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise RetryableError(f"tool proxy at {self._base} unreachable: {exc!r}") from None
        body = _decode(raw)
        if not 200 <= status < 300:
            raise error_from_http(status, body)
        return body if isinstance(body, dict) else {"result": body}

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"text": raw.decode(errors="replace")}
