"""Registrar over loopback gRPC: the registered peers of every Register and Heartbeat reply reach
`on_peers` (the engine's allow-list), and `peers_now` asks the scheduler out of turn."""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest

from agentserve.contracts import EngineStatus, Role
from agentserve.engine_service.registration import Registrar
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc

pytestmark = pytest.mark.integration


class Registry(scheduler_pb2_grpc.SchedulerInternalServicer):
    """Answers with the decode engines registered so far (each Register of a decode adds one)."""

    def __init__(self) -> None:
        self.peers = ["10.0.0.2:50055"]
        self.heartbeats = 0

    async def Register(self, request, context):
        return scheduler_pb2.RegisterResponse(heartbeat_interval_ms=50, peers=self.peers)

    async def Heartbeat(self, request, context):
        self.heartbeats += 1
        return scheduler_pb2.HeartbeatResponse(known=True, peers=self.peers)


def _status() -> EngineStatus:
    return EngineStatus(
        engine_id="p-1",
        role=Role.PREFILL,
        address="127.0.0.1:1",
        model_fingerprint="fp",
        block_size=16,
        vocab_size=8192,
        max_context=512,
    )


def test_every_reply_hands_on_the_registered_peers_and_peers_now_asks_at_once() -> None:
    registry, seen = Registry(), []

    async def main():
        server = grpc.aio.server()
        scheduler_pb2_grpc.add_SchedulerInternalServicer_to_server(registry, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        registrar = Registrar(f"127.0.0.1:{port}", _status, interval_s=10.0, on_peers=lambda p: seen.append(list(p)))
        try:
            assert await registrar.peers_now() == []  # not started: nothing to ask
            registrar.start()
            await asyncio.wait_for(registrar.registered.wait(), 10)
            registry.peers = ["10.0.0.2:50055", "10.0.0.3:50055"]
            now = await registrar.peers_now()
            await asyncio.sleep(0.3)  # the reply's interval (50 ms) replaced the 10 s one: heartbeats flow
        finally:
            await registrar.stop()
            await server.stop(0)
        return now

    now = asyncio.run(main())
    assert now == ["10.0.0.2:50055", "10.0.0.3:50055"]
    assert seen[0] == ["10.0.0.2:50055"]  # from the Register reply
    assert seen[1] == now  # from the out-of-turn heartbeat
    assert registry.heartbeats >= 3 and all(peers == now for peers in seen[1:])


class DrainingRegistry(Registry):
    """Asks the engine to drain in every heartbeat reply; refuses its first `busy` deregistrations."""

    def __init__(self, busy: int) -> None:
        super().__init__()
        self.busy = busy
        self.deregistrations: list[bool] = []

    async def Heartbeat(self, request, context):
        self.heartbeats += 1
        return scheduler_pb2.HeartbeatResponse(known=True, peers=self.peers, drain=True)

    async def Deregister(self, request, context):
        assert request.draining  # the engine reports its drain before it asks to leave
        gone = len(self.deregistrations) >= self.busy
        self.deregistrations.append(gone)
        return scheduler_pb2.DeregisterResponse(deregistered=gone)


def test_a_drain_asked_by_the_scheduler_deregisters_once_idle_and_the_scheduler_agrees() -> None:
    registry = DrainingRegistry(busy=2)
    state = {"draining": False, "idle": False}

    def status() -> EngineStatus:
        return dataclasses.replace(_status(), draining=state["draining"])

    def on_drain() -> None:
        state["draining"] = True

    async def main():
        server = grpc.aio.server()
        scheduler_pb2_grpc.add_SchedulerInternalServicer_to_server(registry, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        registrar = Registrar(f"127.0.0.1:{port}", status, 10.0, on_drain=on_drain, idle=lambda: state["idle"])
        try:
            registrar.start()
            await asyncio.wait_for(registrar.registered.wait(), 10)
            await asyncio.sleep(0.5)  # the first heartbeat asks for the drain; busy here: no deregistration
            asked_before_idle = list(registry.deregistrations)
            state["idle"] = True
            await asyncio.wait_for(registrar.deregistered.wait(), 10)
            beats = registry.heartbeats
            await asyncio.sleep(0.5)
        finally:
            await registrar.stop()
            await server.stop(0)
        return asked_before_idle, beats

    asked_before_idle, beats = asyncio.run(main())
    assert state["draining"] and asked_before_idle == []
    assert registry.deregistrations == [False, False, True]  # the scheduler said no while busy
    assert registry.heartbeats == beats  # nothing is sent after leaving
