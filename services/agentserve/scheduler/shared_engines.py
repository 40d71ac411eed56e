"""EngineDirectory: the engines every scheduler sees, kept in etcd under leases.

An engine registers and heartbeats with one scheduler (whichever its connection reached). That
scheduler writes the engine's status to `engines/<id>` under the engine's lease (the engine timeout
long) and renews the lease with each heartbeat. Every scheduler reads the prefix once a heartbeat
interval: an engine whose key moved is registered or refreshed in its `EngineRegistry` (so its
routing sees every engine's reported queues, whoever received the report), and an engine whose key
is gone (its lease lapsed: no scheduler heard from it for the engine timeout) leaves its view.

An engine keeps its lease when its heartbeats move to another scheduler (the one it talked to
died): the lease id is read from its key, and renewed from there.
"""

from __future__ import annotations

import asyncio
import logging
import math

from agentserve.common.etcd import Etcd, EtcdError
from agentserve.contracts import EngineStatus
from agentserve.convert import engine_status_from_proto, engine_status_to_proto
from agentserve.scheduler.registry import EngineRegistry
from agentserve.scheduler.shared_state import Keys
from agentserve.v1 import common_pb2

log = logging.getLogger(__name__)


class EngineDirectory:
    def __init__(self, etcd: Etcd, keys: Keys, registry: EngineRegistry, timeout_s: float, interval_s: float) -> None:
        self.etcd = etcd
        self.keys = keys
        self.registry = registry
        self.lease_s = max(2, math.ceil(timeout_s))
        self.interval_s = interval_s
        self._pending: dict[str, EngineStatus] = {}  # engine id -> its latest status not yet written
        self._wake = asyncio.Event()
        self._leases: dict[str, int] = {}  # engine id -> its lease, as this scheduler last used it
        self._seen: dict[str, int] = {}  # engine id -> mod revision of its key at the last read
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._publish(), name="etcd-engines-publish"),
            asyncio.create_task(self._follow(), name="etcd-engines-follow"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def publish(self, status: EngineStatus) -> None:
        """An engine registered or heartbeat here: its status goes to etcd (the latest only, soon)."""
        self._pending[status.engine_id] = status
        self._wake.set()

    async def _publish(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            for status in pending.values():
                try:
                    await self._write(status)
                except EtcdError as exc:
                    log.warning("writing engine %s to etcd failed: %s", status.engine_id, exc)

    async def _write(self, status: EngineStatus) -> None:
        key = self.keys.engine(status.engine_id)
        lease = self._leases.get(status.engine_id)
        if lease is None:
            current = await self.etcd.get(key)  # heartbeats moved here: the engine's lease is on its key
            lease = current.lease if current is not None else 0
        if not lease or await self.etcd.keepalive(lease) <= 0:
            lease = await self.etcd.grant(self.lease_s)
        self._leases[status.engine_id] = lease
        await self.etcd.put(key, engine_status_to_proto(status).SerializeToString(), lease=lease)

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sync()
            except EtcdError as exc:
                log.warning("reading engines from etcd failed: %s", exc)

    async def sync(self) -> None:
        """Bring the registry in line with etcd: engines whose key moved refreshed, engines whose key
        is gone dropped."""
        found = await self.etcd.range(self.keys.engines, prefix=True)
        seen: dict[str, int] = {}
        for kv in found:
            status = engine_status_from_proto(common_pb2.EngineStatus.FromString(kv.value))
            seen[status.engine_id] = kv.mod_revision
            if self._seen.get(status.engine_id) == kv.mod_revision:
                continue
            try:
                if not self.registry.heartbeat(status):
                    self.registry.register(status)
            except ValueError as exc:  # another model or block size than the engines already here
                log.warning("engine %s in etcd not used: %s", status.engine_id, exc)
        for engine_id in self._seen.keys() - seen.keys():
            self._leases.pop(engine_id, None)
            if self.registry.mark_dead(engine_id):
                log.warning("dropped engine %s: its etcd lease lapsed", engine_id)
        self._seen = seen
