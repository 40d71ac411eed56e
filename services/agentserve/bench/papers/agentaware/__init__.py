"""`agentserve bench agentaware`: every KV lifecycle policy (`lru`, `agentserve`, and whatever else
the scheduler's registry names) on one generated multi-agent workload, at three Poisson arrival
rates, on emulated-compute engines whose KV pools hold less than the workload's working set.

Modules: `workload` (code-writer and deep-research DAGs, TraceLab tool times), `runs` (one cluster
per policy, a run per rate), `metrics` (a run's figures), `ratios` (the must-show keys and
targets), `bench`, `report`, `plots`, `cli`."""
