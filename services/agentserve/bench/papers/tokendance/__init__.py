"""`agentserve bench tokendance`: shared context across agents in all-gather rounds (issue 16)."""
