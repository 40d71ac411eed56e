"""The emulated RDMA fabric: token-bucket NICs, paced chunked KV streams, hardware profiles.

See DESIGN.md "Emulated fabric". Start with `nic.EmulatedNIC` and `stream.FabricClient`.
"""

from agentserve.fabric.nic import EmulatedNIC, Link, NICStats, Transfer, TransferState, transfer_pace
from agentserve.fabric.token_bucket import TokenBucket

__all__ = ["EmulatedNIC", "Link", "NICStats", "TokenBucket", "Transfer", "TransferState", "transfer_pace"]
