"""The scheduler: sessions, turns, routing and the engine registry (`python -m agentserve.scheduler`)."""
