"""`python -m agentserve.decode [--flags]`: run a decode engine (flags/env in `DecodeConfig`)."""

from agentserve.common.server import main
from agentserve.decode.config import DecodeConfig
from agentserve.decode.service import DecodeService

if __name__ == "__main__":
    main("decode", DecodeConfig, DecodeService)
