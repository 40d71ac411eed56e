"""Per-role authorisation on the internal plane: the table (`InternalRoles`) covers exactly the
internal services' methods and refuses with a message naming the method, the caller's role and who
may call it; over loopback with real certificates, the server skeleton's interceptor lets each role
reach only its methods (unary, client- and server-streaming) and leaves health open to every peer."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentserve.common.certs import SERVICES, ensure_certs
from agentserve.common.channels import open_channel
from agentserve.common.errors import PermissionDenied
from agentserve.common.grpc_roles import role_of
from agentserve.common.internal_roles import CALLERS, ROLES, InternalRoles
from agentserve.common.internal_tls import InternalTLS
from agentserve.v1 import (
    common_pb2,
    decode_pb2,
    decode_pb2_grpc,
    kvstore_pb2,
    prefill_pb2,
    scheduler_pb2,
    scheduler_pb2_grpc,
    toolproxy_pb2,
)
from tests.unit.common.fakes import serving

pytestmark = pytest.mark.unit

INTERNAL_SERVICES = [
    (kvstore_pb2, "KVStore"),
    (decode_pb2, "Decode"),
    (prefill_pb2, "Prefill"),
    (scheduler_pb2, "SchedulerInternal"),
    (toolproxy_pb2, "ToolProxy"),
]


def test_the_table_names_every_internal_method_and_only_those() -> None:
    methods = {
        f"/{service.full_name}/{method.name}"
        for module, name in INTERNAL_SERVICES
        for service in [module.DESCRIPTOR.services_by_name[name]]
        for method in service.methods
    }
    assert set(CALLERS) == methods
    assert set(SERVICES) == ROLES  # every certificate `agentserve certs` issues is a role


def test_each_role_reaches_only_what_its_code_calls() -> None:
    roles = InternalRoles()
    short = {method: method.removeprefix("/agentserve.v1.").replace("/", ".") for method in CALLERS}
    allowed = {role: sorted(short[m] for m in CALLERS if roles.allows(m, role)) for role in sorted(ROLES)}
    assert allowed == {
        "client": ["Decode.Lookup", "KVStore.Lookup", "KVStore.Stats", "ToolProxy.ListTools"],
        "decode": [
            "KVStore.Get",
            "KVStore.Lookup",
            "KVStore.Put",
            "KVStore.Read",
            "KVStore.Stats",
            "KVStore.Write",
            "SchedulerInternal.Heartbeat",
            "SchedulerInternal.Register",
        ],
        "kvstore": ["KVStore.Stats"],
        "prefill": [
            "Decode.LoadKV",
            "Decode.Lookup",
            "Decode.RelayKV",
            "KVStore.Get",
            "KVStore.Lookup",
            "KVStore.Put",
            "KVStore.Read",
            "KVStore.Stats",
            "KVStore.Write",
            "SchedulerInternal.Heartbeat",
            "SchedulerInternal.Register",
        ],
        "scheduler": [
            "Decode.DropKV",
            "Decode.Generate",
            "Decode.HintKV",
            "Decode.PrefetchKV",
            "KVStore.Delete",
            "KVStore.Hint",
            "KVStore.Lookup",
            "KVStore.Pin",
            "KVStore.Stats",
            "KVStore.Unpin",
            "Prefill.Prefill",
            "ToolProxy.ListTools",
        ],
        "toolproxy": ["KVStore.Stats", "SchedulerInternal.ToolCallFinished", "SchedulerInternal.ToolCallStarted"],
    }


def test_health_and_reflection_are_open_and_unknown_methods_closed() -> None:
    roles = InternalRoles()
    assert roles.allows("/grpc.health.v1.Health/Check", None)
    assert roles.allows("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "toolproxy")
    assert not roles.allows("/agentserve.v1.Scheduler/Turn", "scheduler")
    assert not roles.allows("/agentserve.v1.Prefill/Prefill", None)


def test_a_refusal_names_the_method_the_role_and_who_may_call_it() -> None:
    roles = InternalRoles()
    with pytest.raises(PermissionDenied) as refused:
        roles.check("/agentserve.v1.Prefill/Prefill", "client")
    assert str(refused.value) == (
        "/agentserve.v1.Prefill/Prefill: a 'client' certificate may not call this internal method; "
        "only scheduler may call it"
    )
    with pytest.raises(PermissionDenied) as refused:
        roles.check("/agentserve.v1.Scheduler/Turn", None)
    assert str(refused.value) == (
        "/agentserve.v1.Scheduler/Turn: a certificate without a role (common name) may not call this "
        "internal method; no role may call it"
    )


def test_a_table_naming_an_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown roles \['engine'\]"):
        InternalRoles({"/agentserve.v1.Prefill/Prefill": frozenset({"engine"})})


def test_the_role_is_the_certificates_common_name() -> None:
    assert role_of({"x509_common_name": [b"prefill"], "transport_security_type": [b"ssl"]}) == "prefill"
    assert role_of({"transport_security_type": [b"ssl"]}) is None


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
