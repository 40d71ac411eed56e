"""Per-role authorisation on the internal plane: the table (`InternalRoles`) covers exactly the
internal services' methods and refuses with a message naming the method, the caller's role and who
may call it. Over loopback with real certificates: tests/integration/common/test_internal_roles.py."""

from __future__ import annotations

import pytest

from agentserve.common.certs import SERVICES
from agentserve.common.errors import PermissionDenied
from agentserve.common.grpc_roles import role_of
from agentserve.common.internal_roles import CALLERS, ROLES, InternalRoles
from agentserve.v1 import (
    decode_pb2,
    kvstore_pb2,
    prefill_pb2,
    scheduler_pb2,
    toolproxy_pb2,
)

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
            "SchedulerInternal.Deregister",
            "SchedulerInternal.Heartbeat",
            "SchedulerInternal.Register",
        ],
        "kvstore": ["KVStore.Stats"],
        "operator": ["KVStore.Stats", "SchedulerInternal.DrainEngine"],
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
            "SchedulerInternal.Deregister",
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
