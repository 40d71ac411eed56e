"""`agentserve plan`: capacity planning and elastic scaling for agent workloads, on the simulator
(docs/plan.md)."""
