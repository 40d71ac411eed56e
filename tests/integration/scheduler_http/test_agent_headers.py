"""X-Agent-* headers: parsed into AgentInfo, carried to the session they open, 400 naming the header."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agentserve.contracts import AgentInfo
from agentserve.scheduler.http.agent_headers import parse_agent_headers
from agentserve.scheduler.http.app import build_app
from tests.unit.scheduler_http.fakes import FakeCore

pytestmark = pytest.mark.integration

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_no_headers_no_info():
    assert parse_agent_headers({}) is None


def test_all_headers():
    headers = {
        "X-Agent-Id": "writer",
        "X-Agent-Parents": "planner, searcher",
        "X-Agent-Critical": "true",
        "X-Agent-Priority": "-3",
    }
    assert parse_agent_headers(headers) == AgentInfo("writer", ("planner", "searcher"), True, -3)


@pytest.mark.parametrize(
    "headers, match",
    [
        ({"X-Agent-Priority": "high"}, "^X-Agent-Priority must be an integer, got 'high'$"),
        ({"X-Agent-Priority": "1000"}, r"^X-Agent-Priority: priority must be an integer in \[-100, 100\]"),
        ({"X-Agent-Critical": "maybe"}, "^X-Agent-Critical must be true or false, got 'maybe'$"),
        ({"X-Agent-Parents": "a,,b"}, "^X-Agent-Parents: parents: agent ids must not be empty$"),
        ({"X-Agent-Id": "a", "X-Agent-Parents": "a"}, "^X-Agent-Parents: parents: agent 'a' cannot be its own"),
    ],
)
def test_bad_headers_name_the_header(headers, match):
    with pytest.raises(ValueError, match=match):
        parse_agent_headers(headers)


def _post(headers):
    async def main():
        core = FakeCore()
        async with TestClient(TestServer(build_app(core))) as http:
            resp = await http.post("/v1/chat/completions", json=CHAT, headers=headers)
            return resp.status, await resp.json(), core

    return asyncio.run(main())


def test_the_session_opens_with_the_agent_info():
    headers = {"X-Session-Id": "s1", "X-Agent-Id": "coder", "X-Agent-Critical": "1", "X-Agent-Priority": "5"}
    status, _, core = _post(headers)
    assert status == 200
    assert core.sessions["s1"].info == AgentInfo("coder", (), True, 5)


def test_a_bad_header_is_a_400_naming_it():
    status, body, core = _post({"X-Session-Id": "s1", "X-Agent-Critical": "maybe"})
    assert status == 400 and "X-Agent-Critical" in body["error"]["message"] and not core.sessions


def test_agent_headers_without_a_session_are_a_400():
    status, body, _ = _post({"X-Agent-Id": "coder"})
    assert status == 400 and body["error"]["message"] == (
        "X-Agent-* headers describe a session: send them with X-Session-Id"
    )
