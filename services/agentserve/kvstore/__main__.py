"""`python -m agentserve.kvstore [--grpc-port N --data-dir D --fsync false ...]`."""

from agentserve.common.server import main
from agentserve.kvstore.config import KVStoreConfig
from agentserve.kvstore.service import KVStoreService

if __name__ == "__main__":
    main("kvstore", KVStoreConfig, KVStoreService)
