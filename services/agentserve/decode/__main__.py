"""`python -m agentserve.decode [--flags]`: run a decode engine."""

import sys

from agentserve.common.config import load_config
from agentserve.common.server import ServerSettings, run
from agentserve.decode.service import DecodeService
from agentserve.engine_service.config import DecodeConfig


def main(argv: list[str]) -> None:
    config = load_config(DecodeConfig, argv)
    run(DecodeService(config), ServerSettings("decode", config.host, config.grpc_port, config.metrics_port))


if __name__ == "__main__":
    main(sys.argv[1:])
