"""SchedulerCore: the scheduler's API in plain Python, called by the gRPC servicer and the HTTP gateway.

Everything here runs on the event loop. Request errors are ValueError (NotFoundError for unknown
ids); "try again" conditions are RetryableError. A turn raises its request errors before yielding
its first event, so a caller can hold back its response headers until the first event arrives.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

from agentserve.common.errors import NotFoundError, Overloaded
from agentserve.common.internal_tls import internal_tls
from agentserve.contracts import AgentInfo, Role, SamplingParams, ToolCall, TurnEvent
from agentserve.contracts.turn_segments import TurnSegments
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.scheduler import metrics
from agentserve.scheduler.admission import Admission, AdmissionLimits
from agentserve.scheduler.agent_priority import AgentDAG, priority_of
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.control_plane import ControlPlane
from agentserve.scheduler.engine_clients import EngineClients
from agentserve.scheduler.fair_queue import make_turn_queue
from agentserve.scheduler.kv_admission import KVAdmission
from agentserve.scheduler.kv_lifecycle import make_lifecycle_policy
from agentserve.scheduler.kv_parking import KVMoves, KVParking, StoreHints
from agentserve.scheduler.paths import PathPolicy, make_path_policy
from agentserve.scheduler.placement import GlobalScheduler
from agentserve.scheduler.prefill_policy import make_prefill_policy
from agentserve.scheduler.prompts import PromptBuilder
from agentserve.scheduler.registry import Engine, EngineRegistry, EngineStatus
from agentserve.scheduler.relay_policy import make_relay_policy
from agentserve.scheduler.rounds import RoundGroups
from agentserve.scheduler.router import LeastLoadedRouter, Router
from agentserve.scheduler.session_journal import SessionJournal
from agentserve.scheduler.sessions import Session, SessionLimits, SessionStore
from agentserve.scheduler.tool_durations import ToolDurationModel, parse_seeds
from agentserve.scheduler.turn_order import make_turn_order
from agentserve.scheduler.turn_ports import (
    EngineCalls,
    EnginePorts,
    KVDrops,
    KVPorts,
    StoreDeletes,
    StoreLookup,
    TurnPolicy,
)
from agentserve.scheduler.turns import TurnRunner

log = logging.getLogger(__name__)


class SchedulerCore:
    def __init__(
        self,
        config: SchedulerConfig,
        tokenizer: Tokenizer,
        *,
        store: StoreLookup,
        engines: EngineCalls | None = None,
        router: Router | None = None,
        registry: EngineRegistry | None = None,
        path_policy: PathPolicy | None = None,
    ) -> None:
        """Prefer `create`; tests pass fakes for `store` and `engines`."""
        self.config = config
        self.tokenizer = tokenizer
        self.registry = registry or EngineRegistry(config.engine_timeout_ms / 1000)
        self.journal = SessionJournal(config.session_db) if config.session_db else None
        self.sessions = SessionStore(
            SessionLimits(config.max_sessions, config.max_sessions_per_tenant, config.session_ttl_s),
            journal=self.journal,
        )
        if self.journal is not None:
            log.info("%d sessions resumed from %s", len(self.sessions), self.journal.path)
        # State shared with other schedulers in etcd (`--state etcd`); None keeps it all here.
        self.control = (
            ControlPlane(config, self.registry, self.sessions, self._held, self._released)
            if config.state == "etcd"
            else None
        )
        self.admission = Admission(
            AdmissionLimits(
                config.max_inflight_turns,
                config.max_inflight_per_tenant,
                config.tenant_turns_per_s,
                config.tenant_burst,
                config.max_running_turns,
            ),
            queue=make_turn_queue(config.fairness, config.keys().weights),
        )
        self.kv_admission = KVAdmission(
            config.kv_commit_ratio,
            lambda: sum(e.status.total_kv_blocks for e in self.registry.alive(Role.DECODE)),
        )
        self.engines = (
            engines
            if engines is not None
            else EngineClients(
                stall_timeout_s=config.decode_stall_timeout_ms / 1000 or None,
                prefill_timeout_s=config.prefill_timeout_ms / 1000 or None,
                decode_timeout_s=config.decode_timeout_ms / 1000 or None,
                decode_alive=lambda address: self._alive(Role.DECODE, address),
                prefill_alive=lambda address: self._alive(Role.PREFILL, address),
                tls=internal_tls(config.internal_tls_dir),
            )
        )
        self.store = store
        # Agent priority (agent_priority.py): the DAG of the open sessions' agents, read per request.
        self.dag = AgentDAG()
        for resumed in self.sessions:
            self.dag.add(resumed)
        # Fakes of the turn calls alone (unit tests) cannot move KV: parking then keeps everything.
        moves = self.engines if isinstance(self.engines, KVMoves) else None
        drops = self.engines if isinstance(self.engines, KVDrops) else None
        if config.session_kv == "store" and drops is None:
            raise ValueError("session_kv=store needs engine calls that can drop KV (drop_kv)")
        placer = GlobalScheduler(
            self.registry,
            router or LeastLoadedRouter(),
            make_prefill_policy(config.prefill_policy, config.prefill_alpha_ms, config.prefill_beta),
            make_relay_policy(config.relay_policy, config.relay_source),
            path_policy or make_path_policy(config.kv_path_policy),
        )
        self.turns = TurnRunner(
            PromptBuilder(tokenizer, config.max_message_tokens, config.max_message_bytes),
            EnginePorts(self.registry, self.engines, placer, RoundGroups(config.round_window_ms / 1000)),
            KVPorts(
                store,
                drops=drops if config.session_kv == "store" else None,
                tail_blocks=config.tail_blocks,
                deletes=store if isinstance(store, StoreDeletes) else None,
            ),
            TurnPolicy(config.turn_retries, self.priority_of, make_turn_order(config.turn_order)),
            model_name=config.model_name,
            commits=self.control.sessions if self.control is not None else None,
        )
        self.parking = KVParking(
            make_lifecycle_policy(
                config.kv_lifecycle, config.reload_s_per_block, config.park_min_wait_s, config.kv_offload
            ),
            ToolDurationModel(parse_seeds(config.tool_seeds), config.tool_default_s),
            self.registry,
            moves,
            store if isinstance(store, StoreHints) else None,
            lambda engines, session: self.turns.placer.router.pick(engines, session),
            priority_of=self.priority_of,
        )

    def _held(self, session: Session) -> None:
        """A session's copy read from etcd is held here now (its home moved here)."""
        self.dag.add(session)

    def _released(self, session: Session) -> None:
        """A copy held here stopped counting: another scheduler is its home, or its record is gone."""
        self.dag.remove(session)
        self.kv_admission.forget(session.session_id)

    async def start(self) -> None:
        """Join the shared state, when there is one (its engines are known before this serves)."""
        if self.control is not None:
            await self.control.start()

    def priority_of(self, session: Session) -> int:
        """The scheduling priority of the session's next request (caller, DAG, runtime state)."""
        return priority_of(session, self.dag)

    def _alive(self, role: Role, address: str) -> bool:
        """Whether the registry still counts the engine at `address` alive (heartbeats arriving),
        draining or not: a draining engine finishes the calls it has."""
        return any(engine.address == address for engine in self.registry.alive(role, draining=True))

    @classmethod
    def create(cls, config: SchedulerConfig) -> SchedulerCore:
        """The real thing: the tokenizer of `config.model_dir` (or the embedded default model) and
        gRPC clients for the KV store and the engines."""
        from agentserve.kvstore.sharded import ShardedKVStoreClient

        # The default model's tokenizer alone: the scheduler never loads weights (nor torch).
        model_dir = Path(config.model_dir) if config.model_dir else ensure_default_tokenizer()
        # Bounded: a hung store must not hang turns (a failed lookup only costs the hits).
        store = ShardedKVStoreClient(
            config.kvstore_address, timeout_s=config.engine_timeout_ms / 1000, tls=internal_tls(config.internal_tls_dir)
        )
        return cls(config, Tokenizer.from_dir(model_dir), store=store)

    @property
    def model_names(self) -> list[str]:
        return [self.config.model_name]

    def missing_engines(self) -> list[str]:
        """The engine roles a turn needs that no live engine fills; empty when the core can serve.
        Engines register only after their warm-up generation, so a registered engine is warm."""
        return [f"{role.value} engine" for role in Role if not self.registry.alive(role)]

    async def open_session(
        self,
        tenant: str = "",
        agent: str = "",
        parent_session_id: str = "",
        system_prompt: str = "",
        session_id: str | None = None,
        tools: Sequence[dict[str, Any]] = (),
        owner: str = "",
        info: AgentInfo | None = None,
    ) -> str:
        """A new session's id, owned by `owner` (the API key's tenant; "" without keys): only
        calls with the same owner see it, a fork's parent included. With `session_id` (an HTTP
        session header) this is get-or-create: the owner's existing session of the same tenant is
        reused as it is (other arguments ignored). `tools` (OpenAI function tools) are rendered
        with the first turn, as the system prompt is. `info` is what the application says of the
        agent (DAG parents, critical path, priority); its `agent`, if set, must match `agent`'s."""
        if info is not None and agent and info.agent and info.agent != agent:
            raise ValueError(f"agent {agent!r} and the agent info's {info.agent!r} differ")
        if session_id is not None and self.sessions.exists(session_id, owner):
            if self.sessions.get(session_id, owner).tenant != tenant:
                raise ValueError(f"session {session_id!r} belongs to another tenant")
            return session_id
        try:
            self.kv_admission.check_new_session()
        except Overloaded:
            metrics.REFUSED.labels("kv").inc()
            raise
        parent = None
        if self.control is not None and parent_session_id:
            # The parent's committed history, wherever its home is.
            parent = await self.control.sessions.read(parent_session_id, owner)
            if parent is None:
                raise NotFoundError(f"unknown session {parent_session_id!r}")
        created = self.sessions.create(
            tenant, agent, parent_session_id, system_prompt, session_id, tools, owner, info, parent=parent
        )
        if self.control is not None:
            await self.control.sessions.created(created)  # its record and home in etcd (dropped here on failure)
        self.dag.add(created)
        return created.session_id

    def turn(
        self,
        session_id: str,
        *,
        message: str | None = None,
        token_ids: Sequence[int] | None = None,
        role: str = "user",
        sampling: SamplingParams,
        owner: str = "",
        segments: TurnSegments | None = None,
        client_state: dict[str, Any] | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """Run a turn: append `message` (chat-rendered text, role "user", "tool" or "system") or raw
        `token_ids` to the owner's session and stream the reply. `segments` marks the shared blocks
        of an all-gather round among the appended tokens (a block not found there is a ValueError
        at the first iteration). `client_state`: the front's progress once this turn is in, saved
        with the turn's commit (`session_state` returns it). Unknown sessions and malformed
        messages raise here, at the call; the load bounds (Overloaded) and limits that depend on the
        history (context length) and "no engine" raise at the first iteration. Turns of one session
        run one after another. A caller that stops reading early should close the generator
        (`contextlib.aclosing`): that cancels the engine call and releases the session at once."""
        session = self.sessions.get(session_id, owner)
        self.turns.check(message, token_ids, role)
        # The new message's own tokens are not known before rendering: at most max_message_tokens.
        tokens = len(session.history) + len(token_ids or ()) + sampling.max_tokens
        return self._admitted(
            session,
            self._blocks(tokens),
            self.turns.run(
                session,
                sampling=sampling,
                message=message,
                token_ids=token_ids,
                role=role,
                segments=segments,
                client_state=client_state,
            ),
        )

    def complete(
        self,
        prompt_token_ids: Sequence[int],
        sampling: SamplingParams,
        tenant: str = "",
        segments: TurnSegments | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """A stateless completion of `prompt_token_ids` (HTTP without a session): a one-turn
        session that is never stored."""
        session = Session(uuid.uuid4().hex, tenant=tenant)
        turn = self.turns.run(session, sampling=sampling, token_ids=prompt_token_ids, segments=segments)
        return self._admitted(session, self._blocks(len(prompt_token_ids) + sampling.max_tokens), turn)

    def _kv_gauges(self) -> None:
        metrics.KV_COMMITTED.set(self.kv_admission.committed)
        metrics.KV_COMMIT_LIMIT.set(self.kv_admission.limit or 0)

    def _blocks(self, tokens: int) -> int:
        block_size = self.registry.block_size
        return -(-tokens // block_size) if block_size else 0  # no engine known: the turn fails on that

    async def _admitted(
        self, session: Session, blocks: int, events: AsyncGenerator[TurnEvent, None]
    ) -> AsyncGenerator[TurnEvent, None]:
        """`events` once the KV budget and the load bounds admit a turn of `session` needing `blocks`
        of KV, holding its place until it ends. Admitted at the first iteration: a generator never
        iterated holds nothing."""
        async with aclosing(events):
            try:
                commitment = self.kv_admission.admit(session.session_id, blocks)
            except Overloaded:
                metrics.REFUSED.labels("kv").inc()
                raise
            try:
                ticket = await self.admission.admit(session.tenant)  # waits while its turn is queued
            except BaseException as exc:  # refused, or its caller left while it waited
                commitment.release()
                if isinstance(exc, Overloaded):
                    metrics.REFUSED.labels("admission").inc()
                raise
            metrics.IN_FLIGHT.inc()
            self._kv_gauges()
            try:
                async for event in events:
                    yield event
            finally:
                ticket.release()
                commitment.release()
                session.tools.returned = False  # served: the next turn is no return
                if session.tools.waiting and not session.closed:  # a call started during the turn
                    self.kv_admission.waiting(session.session_id, self._blocks(len(session.history)))
                metrics.IN_FLIGHT.dec()
                self._kv_gauges()

    async def close_session(self, session_id: str, owner: str = "") -> tuple[int, int]:
        """Forget the owner's session; returns its (turns, history tokens)."""
        if self.control is not None:
            await self.control.sessions.closed(self.sessions.get(session_id, owner))
        session = self.sessions.close(session_id, owner)
        self.dag.remove(session)
        self.kv_admission.forget(session_id)
        self.parking.closed(session)
        self._kv_gauges()
        return session.turns, len(session.history)

    def session_state(self, session_id: str, owner: str = "") -> dict[str, Any] | None:
        """What a front saved on the owner's session (a turn's `client_state`); None if it has no such session."""
        if not self.sessions.exists(session_id, owner):
            return None
        return dict(self.sessions.get(session_id, owner).client_state)

    def expire_sessions(self) -> int:
        """Close sessions idle past their TTL; how many."""
        expired = self.sessions.expire()
        for session in expired:
            self.dag.remove(session)
            self.kv_admission.forget(session.session_id)
        if self.control is not None:
            self.control.sessions.expired(expired)
        self._kv_gauges()
        if expired:
            log.info("closed %d sessions idle for over %.0f s", len(expired), self.config.session_ttl_s)
        return len(expired)

    def register(self, status: EngineStatus) -> int:
        """Add an engine; returns the heartbeat interval (ms) it should use."""
        self.registry.register(status)
        log.info("registered %s engine %s at %s", status.role.value, status.engine_id, status.address)
        if self.control is not None:
            self.control.engines.publish(status)
        return self.config.heartbeat_interval_ms

    def heartbeat(self, status: EngineStatus) -> bool:
        known = self.registry.heartbeat(status)
        if known and self.control is not None:
            self.control.engines.publish(status)
        return known

    def drain_requested(self, engine_id: str) -> bool:
        """Whether the engine is to drain (told with its heartbeat reply)."""
        engine = self.registry.get(engine_id)
        return engine is not None and engine.draining

    def drain_engine(self, name: str) -> Engine:
        """Scale in: the engine named by id or address takes no new turns from now on and is told
        to drain with its next heartbeat reply (`EngineRegistry.drain` says what is refused)."""
        engine = self.registry.drain(name)
        if self.control is not None:
            self.control.engines.publish(engine.status)  # every scheduler stops placing turns there
        log.info(
            "draining %s engine %s (%d calls and turns on it)", engine.status.role.value, engine.engine_id, engine.busy
        )
        return engine

    def deregister(self, status: EngineStatus) -> bool:
        """A draining engine leaves once idle here (`EngineRegistry.deregister`)."""
        known = self.registry.get(status.engine_id) is not None
        gone = self.registry.deregister(status)
        if gone and known:
            log.info("deregistered drained %s engine %s", status.role.value, status.engine_id)
        return gone

    def peers(self) -> list[str]:
        """The addresses engines may dial (handoffs, relays): the decode engines registered and
        alive, draining ones too (a turn placed there before its drain still hands off to it), the
        only ones a prefill request names. Sent with every Register and Heartbeat reply."""
        return sorted({engine.address for engine in self.registry.alive(Role.DECODE, draining=True)})

    def expire_engines(self) -> list[str]:
        dead = self.registry.expire()
        for engine_id in dead:
            log.warning("dropped engine %s: no heartbeat for %d ms", engine_id, self.config.engine_timeout_ms)
        return dead

    def tool_call_started(self, event: ToolCall) -> None:
        """Record the call; the KV lifecycle policy may park the session's KV meanwhile."""
        session = self._tool_session(event)
        session.tools.started(event)
        self.kv_admission.waiting(session.session_id, self._blocks(len(session.history)))
        self._kv_gauges()
        self.parking.started(session, event)

    def tool_call_finished(self, event: ToolCall) -> None:
        session = self._tool_session(event)
        session.tools.ended(event)
        self.parking.finished(session, event)

    def _tool_session(self, event: ToolCall) -> Session:
        if not event.session_id:
            raise ValueError("tool call event needs a session_id")
        return self.sessions.find(event.session_id)

    async def aclose(self) -> None:
        if self.control is not None:
            await self.control.stop()
        await self.parking.aclose()
        if self.journal is not None:
            self.journal.close()
        for client in (self.engines, self.store):
            close = getattr(client, "close", None)  # fakes in tests have nothing to close
            if close is not None:
                await close()
