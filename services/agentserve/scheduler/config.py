"""SchedulerConfig: the settings the scheduler process runs with (`--flags` / `AGENTSERVE_*` env)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from agentserve.common.api_keys import ApiKeys
from agentserve.common.config import check_choice, config_prefix
from agentserve.common.http_guard import ConnectionLimits
from agentserve.common.internal_tls import internal_tls
from agentserve.scheduler.fair_queue import FairnessName
from agentserve.scheduler.turn_order import TurnOrderName

SESSION_KV = ("decode", "store")
# Where the control plane's state lives: sqlite (this scheduler's memory, sessions written through to
# `session_db` when set: one scheduler) or etcd (shared by every scheduler: shared_state.py).
StateName = Literal["sqlite", "etcd"]


@dataclass(frozen=True)
class SchedulerConfig:
    prog = "python -m agentserve.scheduler"

    host: str = "0.0.0.0"
    grpc_port: int = 50051  # clients' gRPC (the Scheduler service)
    # Engines and the tool proxy (SchedulerInternal), never on the client port; "" host = `host`.
    internal_port: int = 50061
    internal_host: str = ""
    # The internal plane's mutual TLS (common/internal_tls.py): ca.pem, cert.pem, key.pem; "" = plain.
    internal_tls_dir: str = ""
    http_port: int = 8000  # OpenAI-compatible gateway; 0 disables it
    metrics_port: int = 0  # 0 disables /metrics
    model_dir: str = ""  # tokenizer and chat template; empty = the embedded default model
    model_name: str = "agentserve-tiny"
    kvstore_address: str = "127.0.0.1:50052"
    heartbeat_interval_ms: int = 1000  # told to engines at registration
    engine_timeout_ms: int = 5000  # an engine silent this long is dropped from routing
    # A decode stream whose engine is dropped (no heartbeat) is cancelled at once; one also silent
    # this long is cancelled even if the engine still heartbeats. 0 = no such bound (a live engine
    # may legitimately hold a request back while it waits for KV room).
    decode_stall_timeout_ms: int = 0
    # Deadlines of a whole prefill call and a whole decode stream: generous (long prompts and long
    # outputs on slow or emulated engines), so that no internal call can wait forever. 0 = none.
    prefill_timeout_ms: int = 600_000
    decode_timeout_ms: int = 600_000
    max_message_tokens: int = 32768  # per turn's new tokens, after chat rendering
    turn_retries: int = 1  # extra attempts on another engine when one dies before streaming
    kv_path_policy: str = "dualpath"  # how store hits reach prefill: dualpath, always-a, always-b, split (paths.py)
    prefill_policy: str = "least-loaded"  # which prefill engine: least-loaded, dualpath (prefill_policy.py)
    prefill_alpha_ms: float = 100.0  # dualpath: a storage read queue draining within this is short
    prefill_beta: float = 1.5  # dualpath: overloaded above beta x the mean unfinished prefill tokens
    relay_policy: str = "turn-decode"  # which decode engine relays path B: turn-decode, dualpath, other-decode
    # What a relay reads: store (every relayed block from the store, DualPath's path B) or hbm-first
    # (the leading blocks it holds go from its HBM, only the rest from the store) (relay_policy.py).
    relay_source: str = "store"
    # Where a session's KV lives between its turns: decode (its decode engine keeps it, and the next
    # turn goes there) or store (DualPath's regime: the decode engine drops it at the turn's end, it
    # is in the store, and the next turn reads every hit from the store by path A or B).
    session_kv: str = "decode"
    # Tail blocks (tail_blocks.py): a turn's decode engine also persists its context's partial last
    # block, and the session's next turn loads it instead of recomputing those tokens. Off: the
    # store holds whole blocks only (the A/B baseline of `bench dualpath --no-tail-blocks`).
    tail_blocks: bool = True
    # Which waiting turn of equal priority a prefill engine takes first (turn_order.py): arrival, or
    # least-served (the session with the fewest completed turns first).
    turn_order: TurnOrderName = "arrival"
    # KV lifecycle over tool waits (kv_lifecycle.py, kv_parking.py): lru (nothing moves) or agentserve.
    kv_lifecycle: str = "lru"
    # How `agentserve` offloads a parked session's KV: drop it at the tool's start, or demote it
    # (kept, hinted with its return: a `hinted` engine pool evicts it first, only when it needs room).
    kv_offload: str = "drop"
    tool_seeds: str = ""  # name=seconds,...: a tool's expected duration before any was observed
    tool_default_s: float = 1.0  # a tool with no history, seed, nor prediction from the caller or proxy
    reload_s_per_block: float = 0.001  # what reloading one KV block from the store costs (offload break-even)
    park_min_wait_s: float = 0.5  # shorter predicted waits never offload
    # KV admission (kv_admission.py): committed KV (turns in flight, sessions gone to tools) may reach
    # this multiple of the live decode engines' pools; past it new sessions and turns get 429. 0 = off.
    kv_commit_ratio: float = 0.0
    # All-gather rounds (rounds.py): a round's first turn waits this long for the round's others,
    # so they reach the prefill engine together and share each block's master. 0 = no wait.
    round_window_ms: float = 20.0
    # API keys (common/api_keys.py): TENANT:KEY entries; empty (and no file) = no authentication.
    api_keys: str = field(default="", repr=False)
    api_keys_file: str = ""
    # Sessions (scheduler/sessions.py): caps, and how long an idle one is kept.
    max_sessions: int = 100_000
    max_sessions_per_tenant: int = 10_000
    session_ttl_s: float = 3600.0
    session_db: str = ""  # SQLite file sessions are written through to (session_journal.py); "" = memory only
    # Control-plane state (StateName). etcd: engines, sessions and which scheduler runs each session
    # live in etcd at `etcd_endpoints` (client URLs or host:port), under `etcd_prefix`; a request for
    # a session another scheduler runs is forwarded there; a scheduler's sessions move to the others
    # within `etcd_lease_s` of its death. `advertise_host` is where the others reach this one ("" =
    # this host's address, common/netutil.py); `scheduler_id` names it ("" = a fresh random id).
    state: StateName = "sqlite"
    etcd_endpoints: tuple[str, ...] = ()
    etcd_prefix: str = "/agentserve/"
    etcd_lease_s: int = 5
    scheduler_id: str = ""
    advertise_host: str = ""
    # Load bounds (scheduler/admission.py): turns in flight, and each tenant's rate of new turns.
    max_inflight_turns: int = 256  # all tenants, running and waiting; 0 = unbounded
    max_inflight_per_tenant: int = 128  # 0 = unbounded
    # Of those, this many run on the engines at once; the others wait in the scheduler's queue, and
    # `fairness` picks which starts next and whose waiting turn gives way when every place is held
    # (fair_queue.py): wfq (weighted fair queuing across tenants, weights from the keys file) or
    # fifo. 0 = no bound (nothing waits, the engines queue in arrival order).
    max_running_turns: int = 64
    fairness: FairnessName = "wfq"
    tenant_turns_per_s: float = 0.0  # token-bucket rate per tenant; 0 = no rate limit
    tenant_burst: int = 32  # turns a tenant may start at once above its rate
    # Request size: the HTTP body, and one message's text (its tokens: max_message_tokens).
    max_body_bytes: int = 4 << 20
    max_message_bytes: int = 1 << 20
    # Slow and greedy HTTP clients (common/http_guard.py): --http-header-timeout-s and friends.
    http: ConnectionLimits = field(default_factory=ConnectionLimits, metadata=config_prefix("http_"))

    def __post_init__(self) -> None:
        self._check_endpoints()
        self._check_timing()
        self._check_policies()
        self._check_limits()
        self._check_state()

    def _check_state(self) -> None:
        """The shared state's settings (`state` itself is checked with the other choices)."""
        if self.state != "etcd":
            return
        if not self.etcd_endpoints:
            raise ValueError("state etcd needs etcd_endpoints (e.g. --etcd-endpoints 127.0.0.1:2379)")
        if self.session_db:
            raise ValueError("session_db is the sqlite state's; with state etcd, sessions live in etcd")
        if not (self.etcd_prefix.startswith("/") and self.etcd_prefix.endswith("/")):
            raise ValueError(f"etcd_prefix must start and end with '/', got {self.etcd_prefix!r}")
        if self.etcd_lease_s < 2:
            raise ValueError(f"etcd_lease_s must be at least 2 (etcd's shortest lease), got {self.etcd_lease_s}")

    def _check_endpoints(self) -> None:
        """Ports, addresses, the model's name and the internal TLS credentials."""
        if not self.host:
            raise ValueError("host must not be empty")
        if not 1 <= self.grpc_port <= 65535:
            raise ValueError(f"grpc_port must be in [1, 65535], got {self.grpc_port}")
        for name in ("http_port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be in [0, 65535] (0 disables), got {getattr(self, name)}")
        if not 1 <= self.internal_port <= 65535:
            raise ValueError(f"internal_port must be in [1, 65535], got {self.internal_port}")
        ports = [p for p in (self.grpc_port, self.internal_port, self.http_port, self.metrics_port) if p]
        if len(ports) != len(set(ports)):
            raise ValueError(f"grpc_port, internal_port, http_port and metrics_port must differ, got {ports}")
        internal_tls(self.internal_tls_dir)  # unreadable credentials fail at start-up, naming the setting
        if not self.model_name:
            raise ValueError("model_name must not be empty")

        if ":" not in self.kvstore_address:
            raise ValueError(f"kvstore_address must be host:port, got {self.kvstore_address!r}")

    def _check_timing(self) -> None:
        """Deadlines, heartbeats and the engine timeout."""
        if self.prefill_timeout_ms < 0:
            raise ValueError(f"prefill_timeout_ms must be >= 0 (0 = no deadline), got {self.prefill_timeout_ms}")
        if self.decode_timeout_ms < 0:
            raise ValueError(f"decode_timeout_ms must be >= 0 (0 = no deadline), got {self.decode_timeout_ms}")
        if self.decode_stall_timeout_ms < 0:
            raise ValueError(f"decode_stall_timeout_ms must be >= 0 (0 = none), got {self.decode_stall_timeout_ms}")
        for name in ("heartbeat_interval_ms", "engine_timeout_ms", "max_message_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        # One lost heartbeat must not drop a healthy engine.
        if self.engine_timeout_ms < 2 * self.heartbeat_interval_ms:
            raise ValueError(
                f"engine_timeout_ms ({self.engine_timeout_ms}) must be at least twice "
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms})"
            )

    def _check_policies(self) -> None:
        """The policies chosen by name and their parameters, the tool seeds and the retries."""
        from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES, OFFLOAD_MODES
        from agentserve.scheduler.paths import POLICIES
        from agentserve.scheduler.prefill_policy import PREFILL_POLICIES
        from agentserve.scheduler.relay_policy import RELAY_POLICIES, RELAY_SOURCES

        for name, choices in (
            ("kv_path_policy", POLICIES),
            ("prefill_policy", PREFILL_POLICIES),
            ("relay_policy", RELAY_POLICIES),
            ("relay_source", RELAY_SOURCES),
            ("kv_lifecycle", LIFECYCLE_POLICIES),
            ("kv_offload", OFFLOAD_MODES),
            ("session_kv", SESSION_KV),
            ("turn_order", TurnOrderName),
            ("fairness", FairnessName),
            ("state", StateName),
        ):
            check_choice(name, getattr(self, name), choices)
        if not isinstance(self.tail_blocks, bool):
            raise ValueError(f"tail_blocks must be true or false, got {self.tail_blocks!r}")
        if not 0 <= self.prefill_alpha_ms < float("inf"):
            raise ValueError(f"prefill_alpha_ms must be a finite number >= 0, got {self.prefill_alpha_ms}")
        if not 1 <= self.prefill_beta < float("inf"):
            raise ValueError(f"prefill_beta must be a finite number >= 1, got {self.prefill_beta}")
        for name in ("tool_default_s", "reload_s_per_block", "park_min_wait_s", "round_window_ms", "kv_commit_ratio"):
            if not 0 <= getattr(self, name) < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        from agentserve.scheduler.tool_durations import parse_seeds

        parse_seeds(self.tool_seeds)
        if not 0 <= self.turn_retries <= 10:
            raise ValueError(f"turn_retries must be in [0, 10], got {self.turn_retries}")

    def _check_limits(self) -> None:
        """API keys, the bounds on sessions, turns in flight, tenants' rates and request sizes."""
        self.keys()  # malformed keys, an unreadable keys file: fail at start-up
        for name in ("max_sessions", "max_sessions_per_tenant", "tenant_burst", "max_body_bytes", "max_message_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("max_inflight_turns", "max_inflight_per_tenant", "max_running_turns"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0 = unbounded), got {getattr(self, name)}")
        if not (self.session_ttl_s > 0 and math.isfinite(self.session_ttl_s)):
            raise ValueError(f"session_ttl_s must be a positive number of seconds, got {self.session_ttl_s}")
        if not (self.tenant_turns_per_s >= 0 and math.isfinite(self.tenant_turns_per_s)):
            raise ValueError(f"tenant_turns_per_s must be >= 0 (0 = no limit), got {self.tenant_turns_per_s}")

    def keys(self) -> ApiKeys:
        return ApiKeys.load(self.api_keys, self.api_keys_file)
