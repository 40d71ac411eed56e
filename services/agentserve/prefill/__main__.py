"""`python -m agentserve.prefill [--flags]`: run a prefill engine (flags/env in `PrefillConfig`)."""

from agentserve.common.server import main
from agentserve.prefill.config import PrefillConfig
from agentserve.prefill.service import PrefillService

if __name__ == "__main__":
    main("prefill", PrefillConfig, PrefillService)
