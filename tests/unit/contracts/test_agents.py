"""AgentInfo: what an agent says of itself, validated where it is built, and its protobuf form."""

from __future__ import annotations

import pytest

from agentserve.contracts import AgentInfo
from agentserve.convert import agent_info_from_proto, agent_info_to_proto
from agentserve.v1 import scheduler_pb2

pytestmark = pytest.mark.unit


def test_round_trips_through_open_session_request():
    info = AgentInfo("writer", ("planner", "searcher"), critical=True, priority=-7)
    request = scheduler_pb2.OpenSessionRequest(tenant="t")
    agent_info_to_proto(info, request)
    assert (request.agent, list(request.parents), request.critical, request.priority) == (
        "writer",
        ["planner", "searcher"],
        True,
        -7,
    )
    assert agent_info_from_proto(request) == info


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"priority": 101}, r"^priority must be an integer in \[-100, 100\], got 101$"),
        ({"priority": True}, "^priority must be an integer"),
        ({"parents": ("",)}, "^parents: agent ids must not be empty$"),
        ({"parents": tuple(f"a{i}" for i in range(65))}, "^parents: at most 64 agents, got 65$"),
        ({"agent": "a", "parents": ("a",)}, "^parents: agent 'a' cannot be its own parent$"),
        ({"agent": "x" * 129}, "^agent: an agent id must be printable"),
        ({"agent": "tab\there"}, "^agent: an agent id must be printable"),
    ],
)
def test_rejects_out_of_range_fields_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AgentInfo(**kwargs)


def test_a_bad_request_names_the_proto_field():
    request = scheduler_pb2.OpenSessionRequest(agent="a", priority=500)
    with pytest.raises(ValueError, match=r"^OpenSessionRequest\.priority must be an integer"):
        agent_info_from_proto(request)
