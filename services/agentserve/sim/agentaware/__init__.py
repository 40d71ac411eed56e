"""`agentserve sim agentaware`: the agent-aware KV lifecycle at TokenCake's regime, in virtual time."""
