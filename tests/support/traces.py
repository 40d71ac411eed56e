"""The checkout's recorded traces (traces/ at the repository root), as the benches find them."""

from agentserve.bench.common.workloads.traces import MOONCAKE_CONVERSATION, TRACELAB_ROUNDS, TRACES_DIR

__all__ = ["MOONCAKE_CONVERSATION", "TRACELAB_ROUNDS", "TRACES_DIR"]
