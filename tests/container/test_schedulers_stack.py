"""Several schedulers in compose: docker-compose.schedulers.yml over docker-compose.yml runs two
scheduler replicas over etcd behind HAProxy (the `balancer` service) on the usual client ports.

Four sessions of four turns run concurrently through the balancer's published gRPC port. Each
session's turns run on the scheduler that holds it (`SERVED_BY`), whichever replica HAProxy hands a
call to. After every session's second turn, the container of the first session's scheduler is
killed (SIGKILL): the next turns of its sessions are served by the other replica within the lease
time plus the turn, every turn's tokens are the tiny model's full recompute, every turn after the
first finds the history's KV in the store (the taken-over ones included), and every prompt holds
the session's earlier turns exactly once: none lost or appended twice.

A deployment of its own (one decode engine), down after this module: the tier's shared one keeps
the single scheduler of docker-compose.yml.
"""

from __future__ import annotations

import random
import re
import sys

import grpc
import pytest

from agentserve.engine.engine import LLMEngine
from agentserve.v1 import scheduler_pb2_grpc
from tests.support.compose import (
    SCHEDULERS_COMPOSE_FILE,
    SCHEDULERS_SERVICES,
    TEST_TIMEOUT_S,
    TINY_COMPOSE_FILE,
    Stack,
    start_stack,
)
from tests.support.grpc_turns import Conversation, assert_recomputed, open_sessions, run_concurrently

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

SESSIONS, TURNS, KILL_AFTER = 4, 4, 2
MAX_TOKENS = 6
LEASE_S = 5  # the scheduler's default etcd lease
JOINED = re.compile(r"^scheduler-(\d+)\s*\|.*joined etcd as (\S+)")


@pytest.fixture(scope="module")
def schedulers_stack() -> Stack:
    running = start_stack(
        [TINY_COMPOSE_FILE, SCHEDULERS_COMPOSE_FILE],
        env={"AGENTSERVE_DECODE_REPLICAS": "1", "AGENTSERVE_SCHEDULER_REPLICAS": "2"},
        services=SCHEDULERS_SERVICES,
        replicas={"decode": 1, "scheduler": 2},
    )
    try:
        yield running
    finally:
        print(f"\n[compose] logs of {running.project}: {running.save_logs()}", file=sys.stderr)
        running.close()


def replica_of(stack: Stack, scheduler_id: str) -> int:
    """The scheduler container that joined etcd as `scheduler_id`, by its replica number."""
    for line in stack.logs("scheduler").splitlines():
        found = JOINED.match(line)
        if found and found.group(2) == scheduler_id:
            return int(found.group(1))
    raise LookupError(f"no scheduler container joined etcd as {scheduler_id}")


def test_two_scheduler_replicas_behind_haproxy_survive_one_killed_mid_session(
    schedulers_stack: Stack, reference: LLMEngine
):
    rng = random.Random(34)
    conversations = [
        Conversation([[rng.randrange(5, 8000) for _ in range(rng.randrange(12, 30))] for _ in range(TURNS)])
        for _ in range(SESSIONS)
    ]
    victims: list[str] = []

    def kill() -> None:
        for conversation in conversations:  # every turn so far ran on the session's home
            assert len(set(conversation.served_by)) == 1, conversation.served_by
        victims.append(conversations[0].served_by[0])
        schedulers_stack.kill("scheduler", replica_of(schedulers_stack, victims[0]))

    with grpc.insecure_channel(schedulers_stack.grpc_address) as channel:
        stub = scheduler_pb2_grpc.SchedulerStub(channel)
        open_sessions(stub, conversations, "ha")
        run_concurrently(stub, conversations, MAX_TOKENS, KILL_AFTER, kill)

    killed = [c for c in conversations if c.served_by[0] == victims[0]]
    assert 0 < len(killed) < SESSIONS  # the sessions were spread over both replicas
    survivor = next(c.served_by[0] for c in conversations if c.served_by[0] != victims[0])
    for conversation in conversations:
        assert conversation.served_by[KILL_AFTER:] == [survivor] * (TURNS - KILL_AFTER)
        assert_recomputed(conversation, reference, MAX_TOKENS)
    print(f"[schedulers] taken-over turns took {[round(c.seconds[KILL_AFTER], 1) for c in killed]} s", file=sys.stderr)
    for conversation in killed:
        # Taken over within the lease (the wait for it is bounded by two) plus the turn itself.
        assert conversation.seconds[KILL_AFTER] < 2 * LEASE_S + 10, conversation.seconds
