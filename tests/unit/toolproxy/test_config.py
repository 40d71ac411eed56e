"""Upstream list parsing and the toolproxy config's validation."""

from __future__ import annotations

import pytest

from agentserve.common.config import load_config
from agentserve.toolproxy.config import ToolProxyConfig, parse_upstreams

pytestmark = pytest.mark.unit


def test_parse_upstreams():
    assert parse_upstreams("") == {}
    assert parse_upstreams(" search = http://127.0.0.1:9000/search , fetch=https://tools.local/f?x=1,") == {
        "search": "http://127.0.0.1:9000/search",
        "fetch": "https://tools.local/f?x=1",
    }


@pytest.mark.parametrize(
    "text, match",
    [
        ("search", "name=url"),
        ("=http://h/x", "tool name"),
        ("bad name=http://h/x", "tool name"),
        ("sleep=http://h/x", "shadow the built-in"),
        ("a=http://h/x,a=http://h/y", "listed twice"),
        ("a=ftp://h/x", "http:// or https://"),
        ("a=file:///etc/passwd", "http:// or https://"),
        ("a=h/x", "http:// or https://"),
        ("a=http:///x", "no host"),
        ("a=http://h:99999/x", "bad URL"),
    ],
)
def test_bad_upstreams(text, match):
    with pytest.raises(ValueError, match=match):
        parse_upstreams(text)


def test_config_from_flags_and_env():
    config = load_config(
        ToolProxyConfig,
        ["--http-port", "9080", "--upstreams", "s=http://h/s"],
        env={"AGENTSERVE_SCHEDULER_ADDRESS": "sched:50051"},
    )
    assert (config.http_port, config.grpc_port, config.scheduler_address) == (9080, 50056, "sched:50051")
    assert config.upstream_urls == {"s": "http://h/s"}
    assert (config.http.header_timeout_s, config.http.body_timeout_s, config.http.max_connections_per_client) == (
        10.0,
        30.0,
        256,
    )
    bounded = load_config(
        ToolProxyConfig, ["--header-timeout-s", "2"], env={"AGENTSERVE_MAX_CONNECTIONS_PER_CLIENT": "8"}
    )
    assert (bounded.http.header_timeout_s, bounded.http.max_connections_per_client) == (2.0, 8)
    with pytest.raises(ValueError, match="body_timeout_s must be a positive number of seconds, got -1"):
        load_config(ToolProxyConfig, ["--body-timeout-s", "-1"], env={})


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"http_port": 0}, "http_port"),
        ({"grpc_port": 70000}, "grpc_port"),
        ({"http_port": 50056}, "must differ"),
        ({"scheduler_address": "nohost"}, "host:port"),
        ({"max_sleep_s": 0}, "max_sleep_s"),
        ({"report_timeout_s": float("nan")}, "report_timeout_s"),
        ({"upstreams": "x=ftp://h"}, "http"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ToolProxyConfig(**kwargs)
