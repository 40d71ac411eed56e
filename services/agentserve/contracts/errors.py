"""Domain errors that cross a seam (engine clients and their fakes raise them, the scheduler acts on them)."""

from __future__ import annotations


class EngineUnavailable(ConnectionError):
    """A call to the engine at `address` failed because of that engine (dead, unreachable,
    restarting, or unable to take a KV handoff); the turn may move to another one."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"engine at {address} failed: {detail}")
        self.address = address
        self.detail = detail
