"""The server skeleton's interceptors for API keys and malformed messages, over loopback: a
protected method needs a known key and runs as its tenant; other methods pass; bytes that do not
parse as the request message are INVALID_ARGUMENT on every kind of method."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from unittest import mock

import grpc
import pytest

from agentserve.common import server
from agentserve.common.api_keys import ApiKeys
from agentserve.common.channels import open_channel
from agentserve.common.grpc_auth import ApiKeyInterceptor, authenticated_tenant
from agentserve.common.netutil import free_port
from agentserve.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.integration.common.fakes import FailingService

pytestmark = pytest.mark.integration

KEY = "as-test-key-0123456789abcdef"
OPEN = "/agentserve.v1.Scheduler/OpenSession"
TURN = "/agentserve.v1.Scheduler/Turn"


class TenantEcho(scheduler_pb2_grpc.SchedulerServicer):
    async def OpenSession(self, request, context):
        return scheduler_pb2.OpenSessionResponse(session_id=f"tenant={authenticated_tenant()}")

    async def Turn(self, request, context):
        yield scheduler_pb2.TurnChunk(text=f"tenant={authenticated_tenant()}", finished=True)

    async def ListModels(self, request, context):
        return scheduler_pb2.ListModelsResponse(models=[f"tenant={authenticated_tenant()}"])


class KeyedService(FailingService):
    def __init__(self, keys: ApiKeys) -> None:
        self.keys = keys

    def add_to_server(self, grpc_server: grpc.aio.Server) -> list[str]:
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(TenantEcho(), grpc_server)
        return [scheduler_pb2.DESCRIPTOR.services_by_name["Scheduler"].full_name]

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [ApiKeyInterceptor(self.keys, {OPEN, TURN})]


@asynccontextmanager
async def serving(service: server.Service):
    settings = server.ServerSettings("auth-test", "127.0.0.1", free_port(), 0, grace_s=0.5)
    ready = asyncio.Event()
    with mock.patch.object(server, "shutdown_tracing", lambda: None):
        task = asyncio.create_task(server.serve(service, settings, ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            yield f"127.0.0.1:{settings.grpc_port}"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _outcome(call) -> tuple[grpc.StatusCode, str]:
    try:
        reply = await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, str(reply).strip()


async def _turn(stub, metadata) -> tuple[grpc.StatusCode, str]:
    try:
        chunks = [c.text async for c in stub.Turn(scheduler_pb2.TurnRequest(), metadata=metadata)]
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details()
    return grpc.StatusCode.OK, ",".join(chunks)


def test_protected_methods_need_a_known_key_and_run_as_its_tenant() -> None:
    keys = ApiKeys.parse([f"acme:{KEY}"])

    async def main():
        async with serving(KeyedService(keys)) as address, open_channel(address) as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            out = {}
            for name, metadata in {
                "none": (),
                "wrong": (("authorization", "Bearer as-wrong-key-0123456789abc"),),
                "not bearer": (("authorization", KEY),),
                "right": (("authorization", f"Bearer {KEY}"),),
            }.items():
                out[name] = (
                    await _outcome(stub.OpenSession(scheduler_pb2.OpenSessionRequest(), metadata=metadata)),
                    await _turn(stub, metadata),
                )
            # Not protected: passes without a key, with no tenant current.
            out["unprotected"] = await _outcome(stub.ListModels(scheduler_pb2.ListModelsRequest()))
            return out

    out = asyncio.run(main())
    unauthenticated = grpc.StatusCode.UNAUTHENTICATED
    assert out["none"] == ((unauthenticated, "missing API key: send 'Authorization: Bearer <key>'"),) * 2
    assert out["wrong"] == ((unauthenticated, "invalid API key"),) * 2
    assert out["not bearer"] == ((unauthenticated, "the Authorization value must be 'Bearer <key>'"),) * 2
    assert out["right"] == ((grpc.StatusCode.OK, 'session_id: "tenant=acme"'), (grpc.StatusCode.OK, "tenant=acme"))
    assert out["unprotected"] == (grpc.StatusCode.OK, 'models: "tenant=None"')


def test_without_keys_nothing_is_checked() -> None:
    async def main():
        async with serving(KeyedService(ApiKeys())) as address, open_channel(address) as channel:
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            return await _outcome(stub.OpenSession(scheduler_pb2.OpenSessionRequest()))

    assert asyncio.run(main()) == (grpc.StatusCode.OK, 'session_id: "tenant=None"')


# Not a message: a field tag with wire type 7 (none); a string field 1 (tenant, session_id) holding
# invalid UTF-8 (LoadKV's field 1 is bytes: that one parses, so it is sent the first only).
GARBAGE = {"bad wire type": b"\x0f\xff\xff", "invalid utf-8": b"\x0a\x02\xff\xfe"}


def test_malformed_messages_are_invalid_argument_on_every_kind_of_method() -> None:
    async def main():
        async with serving(FailingService()) as address, open_channel(address) as channel:
            out = {}
            for name, raw in GARBAGE.items():
                unary = channel.unary_unary(OPEN, request_serializer=None, response_deserializer=None)
                stream = channel.unary_stream(TURN, request_serializer=None, response_deserializer=None)
                client_stream = channel.stream_unary(
                    "/agentserve.v1.Decode/LoadKV", request_serializer=None, response_deserializer=None
                )
                out[name] = [await _outcome(unary(raw)), await _outcome(_drain(stream(raw)))]
                if name == "bad wire type":
                    out[name].append(await _outcome(client_stream(iter([raw]))))
            # The service still serves well-formed calls.
            stub = scheduler_pb2_grpc.SchedulerStub(channel)
            out["ok"] = [await _outcome(stub.OpenSession(scheduler_pb2.OpenSessionRequest(tenant="fine")))]
            return out

    out = asyncio.run(main())
    expected = ["malformed OpenSession request", "malformed Turn request", "malformed LoadKV request"]
    for name in GARBAGE:
        codes = [code for code, _ in out[name]]
        assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * len(out[name]), (name, out[name])
        assert [details.split(":")[0] for _, details in out[name]] == expected[: len(out[name])]
    assert len(out["bad wire type"]) == 3
    assert out["ok"] == [(grpc.StatusCode.OK, 'session_id: "s-1"')]


def test_without_a_key_malformed_bytes_are_unauthenticated_not_parsed() -> None:
    keys = ApiKeys.parse([f"acme:{KEY}"])

    async def main():
        async with serving(KeyedService(keys)) as address, open_channel(address) as channel:
            out = {}
            for name, raw in {**GARBAGE, "one zero byte": b"\x00"}.items():
                unary = channel.unary_unary(OPEN, request_serializer=None, response_deserializer=None)
                stream = channel.unary_stream(TURN, request_serializer=None, response_deserializer=None)
                out[name] = [(await _outcome(unary(raw)))[0], (await _outcome(_drain(stream(raw))))[0]]
            keyed = (("authorization", f"Bearer {KEY}"),)
            unary = channel.unary_unary(OPEN, request_serializer=None, response_deserializer=None)
            out["with the key"] = [(await _outcome(unary(GARBAGE["bad wire type"], metadata=keyed)))[0]]
            return out

    out = asyncio.run(main())
    for name in (*GARBAGE, "one zero byte"):
        assert out[name] == [grpc.StatusCode.UNAUTHENTICATED] * 2, (name, out[name])
    assert out["with the key"] == [grpc.StatusCode.INVALID_ARGUMENT]


async def _drain(call) -> list:
    return [item async for item in call]
