"""`python -m agentserve.toolproxy [--flags]`: run the tool proxy (flags/env in `ToolProxyConfig`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agentserve.common.config import load_config
from agentserve.common.server import ServerSettings, run
from agentserve.toolproxy.config import ToolProxyConfig
from agentserve.toolproxy.service import ToolProxyService


def main(argv: Sequence[str] | None = None) -> None:
    try:
        config = load_config(ToolProxyConfig, sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.exit(f"toolproxy: {exc}")
    run(ToolProxyService(config), ServerSettings("toolproxy", config.host, config.grpc_port, config.metrics_port))


if __name__ == "__main__":
    main()
