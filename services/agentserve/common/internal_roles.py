"""Which role may call which internal method: the internal plane's authorisation table.

Mutual TLS (internal_tls.py) proves a caller holds a certificate of the deployment's CA; it does not
say what the caller may do. Each certificate names its role in its common name (`common/certs.py`
issues one per service: kvstore, scheduler, prefill, decode, toolproxy, client for tools that look
and operator for operators who act), and `CALLERS` lists, per internal method, the roles whose
code calls it. Anything else is PERMISSION_DENIED: a toolproxy certificate cannot read KV, a decode
certificate cannot prefill, a `client` certificate can look (health, stats, lookups, the tool list)
but not act, and only an `operator` certificate drains an engine (`agentserve drain`).

The table is the contract written where it is enforced: a method missing from it is refused to
everyone (fail closed), so a new RPC is callable only once someone says who calls it.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentserve.common.errors import PermissionDenied

SCHEDULER, PREFILL, DECODE, KVSTORE, TOOLPROXY, CLIENT, OPERATOR = (
    "scheduler",
    "prefill",
    "decode",
    "kvstore",
    "toolproxy",
    "client",
    "operator",
)
ROLES = frozenset({SCHEDULER, PREFILL, DECODE, KVSTORE, TOOLPROXY, CLIENT, OPERATOR})
ENGINES = frozenset({PREFILL, DECODE})

# Services every deployment peer may call: probes (`up`'s, compose's HEALTHCHECK with the
# container's own certificate) and reflection describe, they do not act.
OPEN_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")

# full method name -> roles that call it (who calls what: the proto comments of each service)
CALLERS: Mapping[str, frozenset[str]] = {
    # The KV store: engines move blocks (prefill loads hits and persists, decode persists a turn's
    # blocks and reads what it relays or prefetches); the scheduler looks up, pins and hints.
    "/agentserve.v1.KVStore/Put": ENGINES,
    "/agentserve.v1.KVStore/Write": ENGINES,
    "/agentserve.v1.KVStore/Get": ENGINES,
    "/agentserve.v1.KVStore/Read": ENGINES,
    "/agentserve.v1.KVStore/Lookup": ENGINES | {SCHEDULER, CLIENT},
    "/agentserve.v1.KVStore/Pin": frozenset({SCHEDULER}),
    "/agentserve.v1.KVStore/Unpin": frozenset({SCHEDULER}),
    "/agentserve.v1.KVStore/Hint": frozenset({SCHEDULER}),
    "/agentserve.v1.KVStore/Delete": frozenset({SCHEDULER}),
    "/agentserve.v1.KVStore/Stats": ROLES,
    # A decode engine: the scheduler drives turns and the pool, a prefill engine hands off and relays.
    "/agentserve.v1.Decode/Generate": frozenset({SCHEDULER}),
    "/agentserve.v1.Decode/DropKV": frozenset({SCHEDULER}),
    "/agentserve.v1.Decode/PrefetchKV": frozenset({SCHEDULER}),
    "/agentserve.v1.Decode/HintKV": frozenset({SCHEDULER}),
    "/agentserve.v1.Decode/LoadKV": frozenset({PREFILL}),
    "/agentserve.v1.Decode/RelayKV": frozenset({PREFILL}),
    "/agentserve.v1.Decode/Lookup": frozenset({PREFILL, CLIENT}),
    # A prefill engine: only the scheduler schedules turns.
    "/agentserve.v1.Prefill/Prefill": frozenset({SCHEDULER}),
    # The scheduler's internal port: engines join, report and leave, the tool proxy reports tool
    # waits, an operator drains an engine (scale-in).
    "/agentserve.v1.SchedulerInternal/Register": ENGINES,
    "/agentserve.v1.SchedulerInternal/Heartbeat": ENGINES,
    "/agentserve.v1.SchedulerInternal/Deregister": ENGINES,
    "/agentserve.v1.SchedulerInternal/DrainEngine": frozenset({OPERATOR}),
    "/agentserve.v1.SchedulerInternal/ToolCallStarted": frozenset({TOOLPROXY}),
    "/agentserve.v1.SchedulerInternal/ToolCallFinished": frozenset({TOOLPROXY}),
    # The tool proxy's gRPC: the tool list is for anyone in the deployment to read.
    "/agentserve.v1.ToolProxy/ListTools": frozenset({SCHEDULER, CLIENT}),
}


class InternalRoles:
    """`check(method, role)` before an internal method runs; `callers` is the table (`CALLERS`)."""

    def __init__(self, callers: Mapping[str, frozenset[str]] = CALLERS) -> None:
        unknown = {role for roles in callers.values() for role in roles} - ROLES
        if unknown:
            raise ValueError(f"internal roles table names unknown roles {sorted(unknown)}; roles are {sorted(ROLES)}")
        self.callers = callers

    def allows(self, method: str, role: str | None) -> bool:
        if method.startswith(tuple(f"/{service}/" for service in OPEN_SERVICES)):
            return True
        return role is not None and role in self.callers.get(method, frozenset())

    def check(self, method: str, role: str | None) -> None:
        """PermissionDenied naming the method, the caller's role and the roles that may call it."""
        if self.allows(method, role):
            return
        callers = sorted(self.callers.get(method, ()))
        who = f"a {role!r} certificate" if role else "a certificate without a role (common name)"
        allowed = f"only {', '.join(callers)} may call it" if callers else "no role may call it"
        raise PermissionDenied(f"{method}: {who} may not call this internal method; {allowed}")
