"""`agentserve bench replay` / `bench capacity`: replay agent workloads against a running
agentserve, keeping their causality, and report what serving engineers read (latency split into
first and later turns, goodput against an SLO, cache hits against the trace's reuse, KV bytes by
path), or search the highest load that meets an SLO."""
