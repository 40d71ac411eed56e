"""`python -m agentserve.scheduler [--grpc-port N --http-port N --kvstore-address H:P ...]`."""

from __future__ import annotations

import sys

from agentserve.common.config import load_config
from agentserve.common.server import run
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.service import SchedulerService


def main(argv: list[str] | None = None) -> None:
    try:
        config = load_config(SchedulerConfig, sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.exit(f"scheduler: {exc}")
    service = SchedulerService(config)
    run(service, service.settings())


if __name__ == "__main__":
    main()
