"""A local cluster: every agentserve service as a process on loopback, started in dependency order,
waited on until ready, supervised and stopped (`agentserve up --local`, benches, integration tests)."""
