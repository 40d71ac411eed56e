"""`python -m agentserve.toolproxy [--flags]`: run the tool proxy (flags/env in `ToolProxyConfig`)."""

from agentserve.common.server import main
from agentserve.toolproxy.config import ToolProxyConfig
from agentserve.toolproxy.service import ToolProxyService

if __name__ == "__main__":
    main("toolproxy", ToolProxyConfig, ToolProxyService)
