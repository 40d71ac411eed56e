"""`agentserve bench dualpath`: DualPath's results from one invocation. Every policy (baseline,
layerwise, dualpath, dualpath with split reads) serves the same generated agent workload on a
cluster of its own; the report gives the offline JCT and throughput ratios, the online capacity
ratio at an SLO, the storage-NIC balance and TPOT, with the regime and what limits each figure.

Modules: `workload` (the agents), `policies` (each system's settings; the policy type and the
local cluster per policy are `bench.common.policy` and `bench.common.cluster`), `runs` (offline
run and capacity search), `metrics` (a run's figures), `ratios` (the must-show keys and targets),
`limits` (what bounds a missed target), `report`, `plots`, `sweep`, `cli`."""
