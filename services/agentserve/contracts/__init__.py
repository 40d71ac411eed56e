"""The contract layer: the plain, typed domain objects every service speaks at its seams.

Torch-free, gRPC-free and protobuf-free by rule (import-linter checks it), so the scheduler never
imports torch, policies run in a simulator, and unit-test fakes need neither a network nor protobuf.
`agentserve.convert` is the one module that turns these into protobuf messages and back.
"""

from agentserve.contracts.agents import AgentInfo
from agentserve.contracts.engines import EngineStatus, NICStatus, Role
from agentserve.contracts.errors import EngineUnavailable
from agentserve.contracts.kv import PATH_A, KVHint, KVPath, LoadPlan
from agentserve.contracts.sampling import MAX_LOGPROBS, MAX_TOKENS_LIMIT, SamplingParams
from agentserve.contracts.segments import (
    PrivateSegment,
    ReuseMode,
    ReusePolicy,
    SegmentedPrompt,
    SharedBlock,
    SharedSpan,
    Sibling,
)
from agentserve.contracts.structured import StructuredKind, StructuredOutput, ToolSchema
from agentserve.contracts.tools import ToolCall
from agentserve.contracts.turns import (
    GenerateChunk,
    GenerateRequest,
    PrefillRequest,
    PrefillResult,
    TokenLogprob,
    TurnEvent,
    TurnMeta,
)

__all__ = [
    "Sibling",
    "SharedSpan",
    "SharedBlock",
    "SegmentedPrompt",
    "ReusePolicy",
    "ReuseMode",
    "PrivateSegment",
    "AgentInfo",
    "PATH_A",
    "MAX_LOGPROBS",
    "MAX_TOKENS_LIMIT",
    "EngineStatus",
    "EngineUnavailable",
    "GenerateChunk",
    "GenerateRequest",
    "KVHint",
    "KVPath",
    "LoadPlan",
    "NICStatus",
    "PrefillRequest",
    "PrefillResult",
    "Role",
    "SamplingParams",
    "StructuredKind",
    "StructuredOutput",
    "TokenLogprob",
    "ToolSchema",
    "ToolCall",
    "TurnEvent",
    "TurnMeta",
]
