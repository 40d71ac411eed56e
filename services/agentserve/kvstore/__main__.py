"""`python -m agentserve.kvstore [--grpc-port N --data-dir D --fsync false ...]`."""

from __future__ import annotations

import logging
import sys

from agentserve.common.config import load_config
from agentserve.common.server import run
from agentserve.kvstore.config import KVStoreConfig
from agentserve.kvstore.service import KVStoreService


def main(argv: list[str] | None = None) -> None:
    try:
        config = load_config(KVStoreConfig, sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.exit(f"kvstore: {exc}")
    # Configured before run() does, so the store's start-up scan report is not lost; same format.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s kvstore %(levelname)s %(message)s")
    service = KVStoreService(config)
    run(service, service.settings())


if __name__ == "__main__":
    main()
