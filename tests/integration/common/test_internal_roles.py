"""Per-role authorisation on the internal plane over loopback with real certificates: the server
skeleton's interceptor lets each role reach only its methods (unary, client- and server-streaming)
and leaves health open to every peer; a plain internal plane checks no roles."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.common.certs import ensure_certs
from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.v1 import (
    common_pb2,
    decode_pb2_grpc,
    scheduler_pb2_grpc,
)
from tests.integration.common.fakes import serving

pytestmark = pytest.mark.integration


async def _heartbeat(channel: grpc.aio.Channel) -> tuple[grpc.StatusCode, str]:
    try:
        reply = await scheduler_pb2_grpc.SchedulerInternalStub(channel).Heartbeat(
            common_pb2.EngineStatus(engine_id="d-1"), timeout=5
        )
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, f"known={reply.known}"


async def _load_kv(channel: grpc.aio.Channel) -> tuple[grpc.StatusCode, str]:
    blocks = [common_pb2.KVBlock(block_id=b"b1"), common_pb2.KVBlock(block_id=b"b2")]
    try:
        reply = await decode_pb2_grpc.DecodeStub(channel).LoadKV(iter(blocks), timeout=5)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, f"imported={reply.imported}"


async def _health(channel: grpc.aio.Channel) -> str:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def test_over_mutual_tls_each_certificate_reaches_only_its_roles_methods(tmp_path) -> None:
    ensure_certs(tmp_path, ["scheduler", "decode", "prefill", "toolproxy"])
    tls = {role: InternalTLS.load(str(tmp_path / role)) for role in ("scheduler", "decode", "prefill", "toolproxy")}

    async def main():
        outcomes = {}
        async with serving(tls["scheduler"]) as address:
            for role in ("decode", "toolproxy", "prefill", "scheduler"):
                async with open_channel(address, tls[role]) as channel:
                    outcomes[role] = (await _heartbeat(channel), await _load_kv(channel), await _health(channel))
        return outcomes

    outcomes = asyncio.run(main())
    denied = grpc.StatusCode.PERMISSION_DENIED
    heartbeat_refused = (
        "/agentserve.v1.SchedulerInternal/Heartbeat: a '{}' certificate may not call this internal "
        "method; only decode, prefill may call it"
    )
    load_kv_refused = (
        "/agentserve.v1.Decode/LoadKV: a '{}' certificate may not call this internal method; only prefill may call it"
    )
    assert outcomes == {
        "decode": ((grpc.StatusCode.OK, "known=True"), (denied, load_kv_refused.format("decode")), "SERVING"),
        "toolproxy": (
            (denied, heartbeat_refused.format("toolproxy")),
            (denied, load_kv_refused.format("toolproxy")),
            "SERVING",
        ),
        "prefill": ((grpc.StatusCode.OK, "known=True"), (grpc.StatusCode.OK, "imported=2"), "SERVING"),
        "scheduler": (
            (denied, heartbeat_refused.format("scheduler")),
            (denied, load_kv_refused.format("scheduler")),
            "SERVING",
        ),
    }


def test_a_plain_internal_plane_checks_no_roles() -> None:
    """Without internal TLS there is no certificate to read a role from: development runs as before."""

    async def main():
        async with serving() as address, open_channel(address) as channel:
            return await _heartbeat(channel)

    assert asyncio.run(main()) == (grpc.StatusCode.OK, "known=True")
