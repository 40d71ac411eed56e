"""The chat route over HTTP: a request's segments reach the session turn, and bad ones are a 400."""

from __future__ import annotations

import pytest

from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from tests.unit.scheduler_http.fakes import FakeCore, serve

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "round 2\nagent1: go north\n"}]


def test_the_chat_route_passes_segments_to_the_session_turn_and_refuses_bad_ones_with_400() -> None:
    core = FakeCore()
    segments = {"round": 2, "shared": [{"content_id": "r2/a1", "text": "agent1: go north\n"}]}

    async def scenario(client):
        ok = await client.post(
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": 3, "agentserve_segments": segments},
            headers={"X-Session-Id": "s1"},
        )
        bad = await client.post(
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": 3, "agentserve_segments": {"shared": [{"content_id": ""}]}},
        )
        return ok.status, bad.status, await bad.json()

    ok, bad, body = serve(core, scenario)
    assert ok == 200 and core.segments == [TurnSegments(2, (SharedRef("r2/a1", text="agent1: go north\n"),))]
    assert bad == 400 and body["error"]["message"].startswith("agentserve_segments.shared[0].content_id must be")
