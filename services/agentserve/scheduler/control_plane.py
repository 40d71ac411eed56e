"""ControlPlane: the scheduler's state shared in etcd (`--state etcd`), built from its config.

`membership` is this scheduler's lease and addresses (shared_state.py), `engines` the engines every
scheduler sees (shared_engines.py), `sessions` the records and homes of sessions
(shared_sessions.py). With `--state sqlite` (the default) there is none of it: one scheduler keeps
everything in memory, its sessions written through to SQLite (session_journal.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agentserve.common.etcd import Etcd
from agentserve.common.netutil import advertise_host
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.sessions import Session, SessionStore
from agentserve.scheduler.shared_engines import EngineDirectory
from agentserve.scheduler.shared_sessions import SessionDirectory
from agentserve.scheduler.shared_state import Keys, Membership, Peer, new_scheduler_id

log = logging.getLogger(__name__)


class ControlPlane:
    def __init__(
        self,
        config: SchedulerConfig,
        registry: EngineRegistry,
        sessions: SessionStore,
        on_hold: Callable[[Session], None],
        on_release: Callable[[Session], None],
    ) -> None:
        self.etcd = Etcd(config.etcd_endpoints)
        keys = Keys(config.etcd_prefix)
        host = advertise_host(config.advertise_host)
        me = Peer(
            config.scheduler_id or new_scheduler_id(),
            f"{host}:{config.grpc_port}",
            f"{host}:{config.http_port}" if config.http_port else "",
        )
        self.membership = Membership(self.etcd, keys, me, config.etcd_lease_s)
        self.engines = EngineDirectory(
            self.etcd, keys, registry, config.engine_timeout_ms / 1000, config.heartbeat_interval_ms / 1000
        )
        self.sessions = SessionDirectory(self.etcd, keys, self.membership, sessions, on_hold, on_release)

    @property
    def scheduler_id(self) -> str:
        return self.membership.scheduler_id

    async def start(self) -> None:
        await self.membership.start()
        await self.engines.sync()  # every engine registered anywhere, before this scheduler serves
        self.engines.start()

    async def stop(self) -> None:
        await self.engines.stop()
        await self.sessions.aclose()
        await self.membership.stop()
        await self.etcd.close()
