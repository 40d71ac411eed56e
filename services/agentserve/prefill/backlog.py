"""PrefillBacklog: the prefill tokens an engine has accepted and not finished, for its heartbeat.

The global scheduler's DualPath prefill policy balances compute by this figure (beta). It counts a
request from the moment the engine accepts it (before its store loads, which may queue behind
others on the storage NIC) until its prefill call returns, at the tokens left to compute: the
prompt less its store hits. The scheduler counts what it routed the same way, so the heartbeat and
its own count agree when it is the only scheduler.
"""

from __future__ import annotations

from agentserve.contracts import PrefillRequest, PrefillResult
from agentserve.prefill.worker import PrefillWorker


class PrefillBacklog:
    def __init__(self, worker: PrefillWorker, block_size: int) -> None:
        self.worker = worker
        self.block_size = block_size
        self.tokens = 0  # read by the heartbeat, on the same event loop

    async def prefill(self, request: PrefillRequest) -> PrefillResult:
        tokens = max(0, len(request.token_ids) - request.store_hit_blocks * self.block_size)
        self.tokens += tokens
        try:
            return await self.worker.prefill(request)
        finally:
            self.tokens -= tokens
