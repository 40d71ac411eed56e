"""`python -m agentserve.prefill [--flags]`: run a prefill engine."""

import sys

from agentserve.common.config import load_config
from agentserve.common.server import ServerSettings, run
from agentserve.engine_service.config import PrefillConfig
from agentserve.prefill.service import PrefillService


def main(argv: list[str]) -> None:
    config = load_config(PrefillConfig, argv)
    run(PrefillService(config), ServerSettings("prefill", config.host, config.grpc_port, config.metrics_port))


if __name__ == "__main__":
    main(sys.argv[1:])
