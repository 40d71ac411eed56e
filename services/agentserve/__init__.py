"""agentserve: LLM inference serving built for AI agents."""

__version__ = "0.1.0"
