"""The tool proxy's typed config, and the parser of its upstream tool list."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agentserve.common.api_keys import ApiKeys
from agentserve.common.config import config_prefix
from agentserve.common.http_guard import ConnectionLimits
from agentserve.common.internal_tls import internal_tls

BUILTIN_TOOLS = ("sleep", "echo")
TOOL_NAME_PATTERN = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def parse_upstreams(text: str) -> dict[str, str]:
    """`"search=http://h:9000/search,fetch=https://h/fetch"` -> {name: url}, validated.

    Names are letters, digits and `_ . -`, unique, and not a built-in tool's; URLs are absolute
    http(s) with a host. Entries are comma-separated, so a URL cannot contain a comma.
    """
    upstreams: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, url = (part.strip() for part in entry.partition("="))
        if not sep:
            raise ValueError(f"upstream {entry!r} must be name=url")
        if not TOOL_NAME_PATTERN.fullmatch(name):
            raise ValueError(f"upstream tool name {name!r} must be 1-64 letters, digits or _ . -")
        if name in BUILTIN_TOOLS:
            raise ValueError(f"upstream tool {name!r} would shadow the built-in tool of that name")
        if name in upstreams:
            raise ValueError(f"upstream tool {name!r} is listed twice")
        upstreams[name] = _check_url(name, url)
    return upstreams


def _check_url(name: str, url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise ValueError(f"upstream {name}: bad URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"upstream {name}: URL {url!r} must be http:// or https://")
    if not parts.hostname:
        raise ValueError(f"upstream {name}: URL {url!r} has no host")
    return url


@dataclass(frozen=True)
class ToolProxyConfig:
    prog = "agentserve toolproxy"

    host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 50056
    metrics_port: int = 0  # 0 disables /metrics
    scheduler_address: str = "127.0.0.1:50061"  # the scheduler's internal port (tool-wait events)
    # The internal plane's mutual TLS (common/internal_tls.py): ca.pem, cert.pem, key.pem; "" = plain.
    internal_tls_dir: str = ""
    upstreams: str = ""  # name=url,name=url (see parse_upstreams)
    max_sleep_s: float = 300.0
    upstream_timeout_s: float = 600.0
    report_timeout_s: float = 2.0
    default_prediction_s: float = 1.0  # predicted wait of a tool never seen before
    # The scheduler's API keys (common/api_keys.py): with keys, tool calls need one too.
    api_keys: str = field(default="", repr=False)
    api_keys_file: str = ""
    # Slow and greedy HTTP clients (common/http_guard.py): --header-timeout-s, --body-timeout-s,
    # --max-connections-per-client.
    http: ConnectionLimits = field(default_factory=ConnectionLimits, metadata=config_prefix(""))

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("host must not be empty")
        for name in ("http_port", "grpc_port"):
            if not 1 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be in [1, 65535], got {getattr(self, name)}")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in [0, 65535], got {self.metrics_port}")
        ports = [self.http_port, self.grpc_port] + ([self.metrics_port] if self.metrics_port else [])
        if len(set(ports)) != len(ports):
            raise ValueError(f"http_port, grpc_port and metrics_port must differ, got {ports}")
        host, sep, port = self.scheduler_address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"scheduler_address must be host:port, got {self.scheduler_address!r}")
        for name in ("max_sleep_s", "upstream_timeout_s", "report_timeout_s", "default_prediction_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0 or (value == 0 and name != "default_prediction_s"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
        parse_upstreams(self.upstreams)
        self.keys()
        internal_tls(self.internal_tls_dir)  # unreadable credentials fail at start-up, naming the setting

    def keys(self) -> ApiKeys:
        return ApiKeys.load(self.api_keys, self.api_keys_file)

    @property
    def upstream_urls(self) -> dict[str, str]:
        return parse_upstreams(self.upstreams)
