"""agentserve's Python SDK: sessions, streamed turns and tool calls, async (`AsyncClient`) or blocking (`Client`)."""

from agentserve.contracts.segments import ReuseMode, ReusePolicy
from agentserve.contracts.turn_segments import SharedRef, TurnSegments
from agentserve.sdk.aio import AsyncClient, AsyncSession, AsyncTurn
from agentserve.sdk.errors import (
    AgentServeError,
    AuthenticationError,
    InvalidRequestError,
    RetryableError,
    SessionNotFound,
    ToolCallError,
)
from agentserve.sdk.sync import Client, Session, Turn
from agentserve.sdk.types import SessionClosed, TurnChunk, TurnMetadata, TurnResult

__all__ = [
    "AgentServeError",
    "AsyncClient",
    "AsyncSession",
    "AsyncTurn",
    "AuthenticationError",
    "Client",
    "InvalidRequestError",
    "RetryableError",
    "ReuseMode",
    "ReusePolicy",
    "Session",
    "SessionClosed",
    "SessionNotFound",
    "SharedRef",
    "ToolCallError",
    "Turn",
    "TurnChunk",
    "TurnMetadata",
    "TurnResult",
    "TurnSegments",
]
