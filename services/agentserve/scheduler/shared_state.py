"""Control-plane state several schedulers share in etcd (`--state etcd`): who is a member, which
engines exist, and every session.

Keys, under `--etcd-prefix` (`/agentserve/`):

    schedulers/<id>            {"grpc": host:port, "http": host:port}   the scheduler's lease
    engines/<engine id>        the engine's last EngineStatus (protobuf) an engine lease (engine timeout)
    sessions/<owner>/<id>      the session's record (session_journal.encode_record)  no lease
    homes/<owner>/<id>         the id of the scheduler that runs its turns          that scheduler's lease
    kv/<owner>/<id>            the session's KV ledger (kv_ledger.py), written with each turn   no lease

Each scheduler holds one lease of `etcd_lease_s` seconds and renews it three times a lease. A
scheduler that dies stops renewing: within the lease time its `schedulers/` key and every `homes/`
key it held are gone, and the next turn of each of its sessions is taken over by whichever
scheduler it reaches (`shared_sessions.py`). A scheduler that stops cleanly revokes its lease, so
its sessions move at once. `shared_engines.py` keeps engines under their own leases.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass
from urllib.parse import quote

from agentserve.common.etcd import Etcd, EtcdError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Peer:
    """Another scheduler, as it advertised itself: where to forward a request for its sessions."""

    scheduler_id: str
    grpc: str  # its clients' gRPC port, host:port
    http: str  # its OpenAI-compatible HTTP port, host:port ("" when it has none)


class Keys:
    """Where each kind of state lives under the prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix.encode()

    def scheduler(self, scheduler_id: str) -> bytes:
        return self.prefix + b"schedulers/" + _part(scheduler_id)

    @property
    def engines(self) -> bytes:
        return self.prefix + b"engines/"

    def engine(self, engine_id: str) -> bytes:
        return self.engines + _part(engine_id)

    def session(self, owner: str, session_id: str) -> bytes:
        return self.prefix + b"sessions/" + _part(owner) + b"/" + _part(session_id)

    def home(self, owner: str, session_id: str) -> bytes:
        return self.prefix + b"homes/" + _part(owner) + b"/" + _part(session_id)

    def kv_ledger(self, owner: str, session_id: str) -> bytes:
        return self.prefix + b"kv/" + _part(owner) + b"/" + _part(session_id)


def _part(text: str) -> bytes:
    """One path segment, percent-encoded: owners and ids may hold '/' (the empty owner, no API keys,
    is the empty segment)."""
    return quote(text, safe="").encode()


def new_scheduler_id() -> str:
    return f"scheduler-{uuid.uuid4().hex[:12]}"


class Membership:
    """This scheduler's lease, renewed in the background, with its addresses kept under it."""

    def __init__(self, etcd: Etcd, keys: Keys, me: Peer, lease_s: int) -> None:
        if lease_s < 2:
            raise ValueError(f"etcd_lease_s must be at least 2 (etcd's shortest lease), got {lease_s}")
        self.etcd = etcd
        self.keys = keys
        self.me = me
        self.lease_s = lease_s
        self.lease = 0  # the current lease's id; a new one after a lapse
        self._task: asyncio.Task | None = None
        self._peers: dict[str, Peer] = {}

    @property
    def scheduler_id(self) -> str:
        return self.me.scheduler_id

    async def start(self) -> None:
        await self._join()
        self._task = asyncio.create_task(self._renew(), name="etcd-lease")

    async def _join(self) -> None:
        self.lease = await self.etcd.grant(self.lease_s)
        record = {"grpc": self.me.grpc, "http": self.me.http}
        await self.etcd.put(self.keys.scheduler(self.scheduler_id), json.dumps(record).encode(), lease=self.lease)
        log.info("joined etcd as %s (lease %x, %d s)", self.scheduler_id, self.lease, self.lease_s)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if await self.etcd.keepalive(self.lease) <= 0:
                    # Lapsed (we were stalled or cut off for a lease time): every home key we held is
                    # gone and other schedulers may have taken our sessions. Join again; each session
                    # is claimed anew by its next turn (shared_sessions.py re-reads it then).
                    log.warning("etcd lease %x lapsed; joining again", self.lease)
                    await self._join()
            except EtcdError as exc:
                log.warning("renewing etcd lease %x failed: %s", self.lease, exc)

    async def peer(self, scheduler_id: str) -> Peer | None:
        """Where scheduler `scheduler_id` listens; None once its lease has lapsed."""
        known = self._peers.get(scheduler_id)
        if known is not None:
            return known
        kv = await self.etcd.get(self.keys.scheduler(scheduler_id))
        if kv is None:
            return None
        record = json.loads(kv.value)
        peer = self._peers[scheduler_id] = Peer(scheduler_id, record["grpc"], record.get("http", ""))
        return peer

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.lease:
            try:
                await self.etcd.revoke(self.lease)  # our sessions move at once, not a lease time later
            except EtcdError as exc:
                log.warning("revoking etcd lease %x failed: %s", self.lease, exc)
